#include "tools/chorusrun/exit_status.h"

#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>

namespace chorus::run {
namespace {

TEST_CASE("a normal exit keeps its status", "[unit]") {
  CHECK(shell_exit_code(W_EXITCODE(0, 0)) == 0);
  CHECK(shell_exit_code(W_EXITCODE(3, 0)) == 3);
  CHECK(describe_wait_status(W_EXITCODE(3, 0)) == "exited with status 3");
}

TEST_CASE("a death by signal maps to 128 plus the signal", "[unit]") {
  CHECK(shell_exit_code(W_EXITCODE(0, SIGKILL)) == 137);
  CHECK(describe_wait_status(W_EXITCODE(0, SIGKILL)) == "killed by signal 9 (Killed)");
  CHECK(describe_wait_status(W_EXITCODE(0, SIGSEGV) | WCOREFLAG) ==
        "killed by signal 11 (Segmentation fault) (core dumped)");
}

TEST_CASE("waitid reports map to the same statuses", "[unit]") {
  siginfo_t info{};
  info.si_code = CLD_EXITED;
  info.si_status = 3;
  CHECK(shell_exit_code(wait_status_of(info)) == 3);
  info.si_code = CLD_KILLED;
  info.si_status = SIGTERM;
  CHECK(shell_exit_code(wait_status_of(info)) == 143);
  info.si_code = CLD_DUMPED;
  info.si_status = SIGABRT;
  CHECK(describe_wait_status(wait_status_of(info)) == "killed by signal 6 (Aborted) (core dumped)");
}

TEST_CASE("signals are named the way kill(1) spells them", "[unit]") {
  CHECK(signal_name(SIGTERM) == "SIGTERM");
  CHECK(signal_name(SIGINT) == "SIGINT");
}

}  // namespace
}  // namespace chorus::run
