#include "tools/chorusrun/exit_status.h"

#include <fmt/format.h>
#include <string.h>
#include <sys/wait.h>

namespace chorus::run {

int shell_exit_code(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;  // stopped/continued are never reported: waitpid() runs without WUNTRACED
}

std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exited with status {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    const int sig = WTERMSIG(wait_status);
    const char* what = sigdescr_np(sig);
    return fmt::format("killed by signal {} ({}){}", sig, what ? what : "unknown signal",
                       WCOREDUMP(wait_status) ? " (core dumped)" : "");
  }
  return fmt::format("ended with wait status {:#x}", wait_status);
}

int wait_status_of(const siginfo_t& info) {
  switch (info.si_code) {
    case CLD_EXITED:
      return W_EXITCODE(info.si_status, 0);
    case CLD_DUMPED:
      return W_EXITCODE(0, info.si_status) | WCOREFLAG;
    default:  // CLD_KILLED; stops are never asked for
      return W_EXITCODE(0, info.si_status);
  }
}

std::string signal_name(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signo);
}

}  // namespace chorus::run
