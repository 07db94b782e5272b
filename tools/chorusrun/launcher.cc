#include "tools/chorusrun/launcher.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <system_error>

#include "tools/chorusrun/exit_codes.h"
#include "tools/chorusrun/exit_status.h"
#include "tools/chorusrun/line_prefixer.h"
#include "tools/chorusrun/rank_process.h"
#include "tools/chorusrun/signal_channel.h"
#include "tools/chorusrun/unique_fd.h"

extern char** environ;

namespace chorus::run {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kReadChunk = 64 * 1024;

// A pipe holds at most /proc/sys/fs/pipe-max-size bytes (1 MiB by default),
// so this many reads empty the pipe of an exited rank, plus one to see EOF.
// The bound matters when something the rank started keeps writing.
constexpr int kDrainReads = (1 << 20) / kReadChunk + 1;

// Once every rank has exited, output pipes still open belong to processes the
// ranks left behind. Those in a rank's process group are killed at once; this
// bounds the wait for any that escaped it (setsid) before chorusrun exits.
constexpr auto kLeftoverDrain = std::chrono::seconds(1);

// chorusrun holds two pipes per rank, which for a few hundred ranks exceeds
// the usual soft limit of 1024 descriptors. Raises the soft limit as far as
// the hard one allows and returns the original, which the ranks get back.
rlimit raise_open_files_limit(int ranks) {
  rlimit original{};
  if (::getrlimit(RLIMIT_NOFILE, &original) != 0) return original;
  const rlim_t wanted = 2 * static_cast<rlim_t>(ranks) + 64;
  if (original.rlim_cur != RLIM_INFINITY && original.rlim_cur < wanted) {
    rlimit raised = original;
    raised.rlim_cur =
        original.rlim_max == RLIM_INFINITY ? wanted : std::min(wanted, original.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &raised);
  }
  return original;
}

Clock::duration to_clock(Seconds s) { return std::chrono::ceil<Clock::duration>(s); }

// One of a rank's two output pipes and where its lines go.
struct Stream {
  Stream(std::string prefix, OutputStream& to) : lines(std::move(prefix)), sink(&to) {}
  UniqueFd fd;
  LinePrefixer lines;
  OutputStream* sink;
};

struct Rank {
  Rank(int i, bool prefix, OutputStream& out_sink, OutputStream& err_sink)
      : index(i),
        out(prefix ? fmt::format("[{}] ", i) : std::string(), out_sink),
        err(prefix ? fmt::format("[{}] ", i) : std::string(), err_sink) {}
  int index;
  pid_t pid = -1;          // also the rank's process group id
  bool running = false;    // started and not yet exited
  bool collected = false;  // exited and reaped: pid may now be reused
  Stream out;
  Stream err;
};

// The job's state machine. kRunning until the first failure (rank failure,
// timeout, signal to chorusrun, launch error); kTerminating after the first
// signal went to the ranks; kKilling after SIGKILL. Exit reporting only
// happens in kRunning, so ranks dying of our own SIGTERM are not reported as
// failures of their own.
enum class Phase { kRunning, kTerminating, kKilling };

class Job {
 public:
  Job(const JobSpec& spec, OutputStream& out, OutputStream& err) : spec_(spec), err_(err) {
    ranks_.reserve(static_cast<std::size_t>(spec.environment.world_size));
    for (int i = 0; i < spec.environment.world_size; ++i) {
      ranks_.emplace_back(i, spec.prefix_output, out, err);
    }
  }

  int run() {
    SignalChannel signals;
    if (spec_.timeout) timeout_at_ = Clock::now() + to_clock(*spec_.timeout);
    ChildSetup child_setup;
    child_setup.signal_mask = signals.original_mask();
    child_setup.open_files = raise_open_files_limit(spec_.environment.world_size);
    launch(child_setup);
    while (!finished()) {
      wait_for_events(signals);
      check_deadlines();
    }
    flush_partial_lines();
    collect_ranks();
    return first_failure_.value_or(0);
  }

 private:
  void launch(const ChildSetup& child_setup) {
    std::vector<std::string> base;
    for (char** e = environ; *e != nullptr; ++e) base.emplace_back(*e);
    for (auto& rank : ranks_) {
      try {
        RankProcess p = spawn_rank(
            spec_.command, rank_environment(base, spec_.environment, rank.index), child_setup);
        rank.pid = p.pid;
        rank.running = true;
        rank.out.fd = std::move(p.stdout_fd);
        rank.err.fd = std::move(p.stderr_fd);
        ++running_;
      } catch (const std::system_error& e) {
        report(fmt::format("cannot start rank {}: {}", rank.index, e.what()));
        fail(kExitLaunchFailure, SIGTERM);
        return;
      }
    }
  }

  // One poll() over the signalfd and every open pipe, bounded by the nearest
  // deadline. Pipes are read before signals so that a rank's last output is
  // relayed before its exit is reported.
  void wait_for_events(SignalChannel& signals) {
    fds_.clear();
    polled_.clear();
    fds_.push_back({signals.fd(), POLLIN, 0});
    for (auto& rank : ranks_) {
      for (Stream* s : {&rank.out, &rank.err}) {
        if (!s->fd) continue;
        fds_.push_back({s->fd.get(), POLLIN, 0});
        polled_.push_back(s);
      }
    }
    if (::poll(fds_.data(), fds_.size(), poll_timeout_ms()) < 0) {
      if (errno == EINTR) return;
      throw std::system_error(errno, std::generic_category(), "poll");
    }
    for (std::size_t i = 1; i < fds_.size(); ++i) {
      if (fds_[i].revents != 0) pump(*polled_[i - 1], 1);
    }
    if (fds_[0].revents != 0) {
      while (const auto sig = signals.read()) {
        if (*sig == SIGCHLD) {
          check_exits();
        } else {
          on_signal(*sig);
        }
      }
    }
  }

  // Relays what a pipe holds, in at most `max_reads` reads. One read per poll
  // round keeps a chatty rank from starving the others; kDrainReads empties
  // the pipe of a rank that has exited, whose output is all in the pipe.
  void pump(Stream& s, int max_reads) {
    for (int i = 0; i < max_reads && s.fd; ++i) {
      const ssize_t n = ::read(s.fd.get(), buffer_.data(), buffer_.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      text_.clear();
      if (n > 0) {
        s.lines.feed({buffer_.data(), static_cast<std::size_t>(n)}, text_);
      } else {
        // EOF (or a read error, which leaves nothing more to relay).
        s.lines.finish(text_);
        s.fd.reset();
      }
      s.sink->write(text_);
    }
  }

  // Notices ranks that have exited but leaves them unreaped (WNOWAIT): while
  // a rank is a zombie its pid cannot be reused, so its process group id
  // stays ours and kill(-pid) can only reach what the rank left behind, never
  // an unrelated process group that got the recycled number.
  void check_exits() {
    for (auto& rank : ranks_) {
      if (!rank.running) continue;
      siginfo_t info{};
      if (::waitid(P_PID, static_cast<id_t>(rank.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == rank.pid) {
        on_rank_exit(rank, wait_status_of(info));
      }
    }
  }

  // At the very end: every group has been sent SIGKILL, zombies can go.
  void collect_ranks() {
    for (auto& rank : ranks_) {
      if (rank.pid <= 0 || rank.collected || rank.running) continue;
      while (::waitpid(rank.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      rank.collected = true;
    }
  }

  void on_rank_exit(Rank& rank, int status) {
    rank.running = false;
    --running_;
    pump(rank.out, kDrainReads);
    pump(rank.err, kDrainReads);
    const int code = shell_exit_code(status);
    if (code != 0 && phase_ == Phase::kRunning) {
      report(fmt::format("rank {} {}", rank.index, describe_wait_status(status)));
      fail(code, SIGTERM);
    }
    if (running_ == 0) {
      // The ranks are done, so is the job: stop whatever they left behind.
      all_exited_at_ = Clock::now();
      signal_groups(SIGKILL);
    }
  }

  void on_signal(int sig) {
    if (phase_ == Phase::kRunning && running_ > 0) {
      report(fmt::format("received {}; forwarding it to the ranks", signal_name(sig)));
      fail(128 + sig, sig);
      return;
    }
    if (running_ > 0) {
      report(fmt::format("received {} while stopping the job; sending SIGKILL to the ranks",
                         signal_name(sig)));
    }
    if (!first_failure_) first_failure_ = 128 + sig;
    signal_groups(SIGKILL);
    phase_ = Phase::kKilling;
  }

  void check_deadlines() {
    const auto now = Clock::now();
    if (phase_ == Phase::kRunning && running_ > 0 && timeout_at_ && now >= *timeout_at_) {
      report(fmt::format("job exceeded --timeout of {:g} s; stopping it", spec_.timeout->count()));
      fail(kExitTimeout, SIGTERM);
    }
    if (phase_ == Phase::kTerminating && running_ > 0 && now >= kill_at_) {
      std::vector<int> stuck;
      for (const auto& rank : ranks_) {
        if (rank.running) stuck.push_back(rank.index);
      }
      report(fmt::format("rank{} {} still running {:g} s after {}; sending SIGKILL",
                         stuck.size() == 1 ? "" : "s", fmt::join(stuck, ", "), spec_.grace.count(),
                         signal_name(terminate_signal_)));
      signal_groups(SIGKILL);
      phase_ = Phase::kKilling;
    }
  }

  // Records the job's exit code (the first failure wins) and asks every rank
  // to stop with `sig`; SIGKILL follows after the grace period.
  void fail(int exit_code, int sig) {
    if (!first_failure_) first_failure_ = exit_code;
    phase_ = Phase::kTerminating;
    terminate_signal_ = sig;
    kill_at_ = Clock::now() + to_clock(spec_.grace);
    signal_groups(sig);
  }

  // Signals every rank's process group: the rank if it still runs, and what
  // it started, even after the rank itself exited (its zombie keeps the group
  // id ours, see check_exits). A rank that left its group is signalled
  // directly.
  void signal_groups(int sig) {
    for (const auto& rank : ranks_) {
      if (rank.pid <= 0 || rank.collected) continue;
      if (::kill(-rank.pid, sig) != 0 && errno == ESRCH && rank.running) ::kill(rank.pid, sig);
    }
  }

  bool finished() const {
    if (running_ > 0) return false;
    const bool streams_open = std::any_of(ranks_.begin(), ranks_.end(),
                                          [](const Rank& r) { return r.out.fd || r.err.fd; });
    return !streams_open || Clock::now() >= all_exited_at_ + kLeftoverDrain;
  }

  // For pipes that escaped processes still held open past kLeftoverDrain:
  // the unfinished line they already wrote is relayed all the same.
  void flush_partial_lines() {
    for (auto& rank : ranks_) {
      for (Stream* s : {&rank.out, &rank.err}) {
        text_.clear();
        s->lines.finish(text_);
        s->sink->write(text_);
      }
    }
  }

  int poll_timeout_ms() const {
    std::optional<Clock::time_point> next;
    const auto consider = [&next](Clock::time_point t) { next = next ? std::min(*next, t) : t; };
    if (running_ == 0) {
      consider(all_exited_at_ + kLeftoverDrain);
    } else if (phase_ == Phase::kRunning && timeout_at_) {
      consider(*timeout_at_);
    } else if (phase_ == Phase::kTerminating) {
      consider(kill_at_);
    }
    if (!next) return -1;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
  }

  void report(const std::string& message) { err_.write(fmt::format("chorusrun: {}\n", message)); }

  const JobSpec& spec_;
  OutputStream& err_;
  std::vector<Rank> ranks_;
  int running_ = 0;
  Phase phase_ = Phase::kRunning;
  std::optional<int> first_failure_;
  int terminate_signal_ = SIGTERM;
  std::optional<Clock::time_point> timeout_at_;
  Clock::time_point kill_at_{};
  Clock::time_point all_exited_at_{};

  std::array<char, kReadChunk> buffer_{};
  std::string text_;
  std::vector<pollfd> fds_;
  std::vector<Stream*> polled_;
};

}  // namespace

int run_job(const JobSpec& spec, OutputStream& out, OutputStream& err) {
  return Job(spec, out, err).run();
}

}  // namespace chorus::run
