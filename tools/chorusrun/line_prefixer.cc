#include "tools/chorusrun/line_prefixer.h"

#include <utility>

namespace chorus::run {

LinePrefixer::LinePrefixer(std::string prefix, std::size_t max_line)
    : prefix_(std::move(prefix)), max_line_(max_line == 0 ? 1 : max_line) {}

void LinePrefixer::feed(std::string_view data, std::string& out) {
  while (!data.empty()) {
    const auto newline = data.find('\n');
    if (newline == std::string_view::npos) {
      // Top up the held line to at most max_line_ bytes; a full one goes out
      // now rather than waiting for a newline that may never come.
      const auto room = max_line_ - partial_.size();
      const auto take = std::min(room, data.size());
      partial_.append(data.substr(0, take));
      data.remove_prefix(take);
      if (partial_.size() == max_line_) emit({}, out);
      continue;
    }
    emit(data.substr(0, newline), out);
    data.remove_prefix(newline + 1);
  }
}

void LinePrefixer::finish(std::string& out) {
  if (!partial_.empty()) emit({}, out);
}

// Writes prefix + held partial line + `tail` + '\n' and forgets the partial.
void LinePrefixer::emit(std::string_view tail, std::string& out) {
  out.append(prefix_);
  out.append(partial_);
  out.append(tail);
  out.push_back('\n');
  partial_.clear();
}

}  // namespace chorus::run
