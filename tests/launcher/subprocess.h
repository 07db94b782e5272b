// Subprocess: runs a command for a test with its output captured and its
// lifetime bounded, so a launcher bug fails a test instead of hanging it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace chorus::run::test {

using Seconds = std::chrono::duration<double>;

struct Outcome {
  int exit_code = -1;      ///< Shell style: status, or 128 + signal.
  bool timed_out = false;  ///< The harness had to SIGKILL it at the limit.
  std::string out;
  std::string err;
  Seconds elapsed{};  ///< From start until the process exited.
};

/// One child process with stdout and stderr captured through pipes. Its
/// environment is the test's, without CHORUS_JOB_TOKEN, plus `extra_env`
/// (NAME=VALUE). Not thread-safe; one test thread drives it.
class Subprocess {
 public:
  explicit Subprocess(const std::vector<std::string>& argv,
                      const std::vector<std::string>& extra_env = {});
  ~Subprocess();  ///< SIGKILLs and reaps the process if still running.
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  void send_signal(int sig);

  /// Reads output until `done(out, err)` holds or `limit` passes.
  /// Returns whether `done` held.
  bool read_until(const std::function<bool(const std::string&, const std::string&)>& done,
                  Seconds limit);

  /// Reads output until the process has exited and its pipes are closed.
  /// At `limit` it is SIGKILLed and the outcome marked timed_out. Pipes that
  /// outlive the process (held by orphans) are read for at most 2 s more.
  Outcome wait(Seconds limit);

  const std::string& out() const { return outcome_.out; }
  const std::string& err() const { return outcome_.err; }

 private:
  // One poll round of at most `max_wait`; returns false when both pipes are closed.
  bool pump(Seconds max_wait);
  void try_reap();

  pid_t pid_ = -1;
  bool exited_ = false;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::chrono::steady_clock::time_point started_;
  Outcome outcome_;
};

/// Runs `argv` to completion (or `limit`) and returns what happened.
Outcome run(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env = {},
            Seconds limit = Seconds(20));

/// Splits text into lines (without their '\n').
std::vector<std::string> lines_of(const std::string& text);

}  // namespace chorus::run::test
