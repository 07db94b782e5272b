#include "core/log_limiter.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <tuple>

namespace chorus::core {

std::string LogLimiter::Summary::text() const {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", seconds);
  return "... " + std::to_string(suppressed) + " more like this in the last " + secs +
         " s (rate-limited; the last one: " + sample + ")";
}

std::string LogLimiter::kind_of(int level, std::string_view message) {
  std::string kind = std::to_string(level) + ":";
  // Long lines are one kind by their start: a kind is a call site, and the
  // site's fixed text comes first.
  const size_t n = std::min<size_t>(message.size(), 160);
  for (size_t i = 0; i < n; ++i) {
    if (std::isdigit(static_cast<unsigned char>(message[i]))) {
      if (kind.back() != '#') kind += '#';
    } else {
      kind += message[i];
    }
  }
  return kind;
}

void LogLimiter::take(State& s, Clock::time_point now, std::vector<Summary>& due) {
  if (s.suppressed > 0) {
    Summary sum;
    sum.level = s.level;
    sum.suppressed = s.suppressed;
    sum.seconds = std::chrono::duration<double>(now - s.start).count();
    sum.sample = std::move(s.sample);
    due.push_back(std::move(sum));
  }
  s.suppressed = 0;
  s.sample.clear();
}

void LogLimiter::close_expired(Clock::time_point now, std::vector<Summary>& due) {
  if (now < next_due_) return;
  next_due_ = Clock::time_point::max();
  for (auto it = kinds_.begin(); it != kinds_.end();) {
    State& s = it->second;
    if (now - s.start >= settings_.interval) {
      take(s, now, due);
      it = kinds_.erase(it);  // a new interval starts with the kind's next line
      continue;
    }
    if (s.suppressed > 0) next_due_ = std::min(next_due_, s.start + settings_.interval);
    ++it;
  }
}

bool LogLimiter::admit(int level, std::string_view message, Clock::time_point now,
                       std::vector<Summary>& due) {
  close_expired(now, due);
  std::string kind = kind_of(level, message);
  auto it = kinds_.find(kind);
  if (it == kinds_.end()) {
    if (kinds_.size() >= settings_.max_kinds) kind = std::to_string(level) + ":(other kinds)";
    bool fresh = false;
    std::tie(it, fresh) = kinds_.try_emplace(std::move(kind));
    if (fresh) {
      it->second.start = now;
      it->second.level = level;
    }
  }
  State& s = it->second;
  if (now - s.start >= settings_.interval) {  // this kind's interval is over: a new one
    take(s, now, due);
    s.start = now;
    s.admitted = 0;
  }
  if (s.admitted < settings_.burst) {
    ++s.admitted;
    return true;
  }
  ++s.suppressed;
  s.sample.assign(message);
  next_due_ = std::min(next_due_, s.start + settings_.interval);
  return false;
}

void LogLimiter::flush(Clock::time_point now, std::vector<Summary>& due) {
  for (auto& [kind, s] : kinds_) take(s, now, due);
  kinds_.clear();
  next_due_ = Clock::time_point::max();
}

}  // namespace chorus::core
