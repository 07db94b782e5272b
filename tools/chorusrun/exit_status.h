// How a rank ended, in words and as the exit code a shell would report.
#pragma once

#include <signal.h>

#include <string>

namespace chorus::run {

/// Exit code for a waitpid() status the way POSIX shells report it: the
/// exit status, or 128 + signal number for a death by signal.
int shell_exit_code(int wait_status);

/// "exited with status 3", "killed by signal 9 (Killed)", with
/// " (core dumped)" appended when the kernel wrote a core.
std::string describe_wait_status(int wait_status);

/// The waitpid()-style status for what waitid() reported about an exited child.
int wait_status_of(const siginfo_t& info);

/// "SIGTERM" for SIGTERM; "signal 64" for a number glibc has no name for.
std::string signal_name(int signo);

}  // namespace chorus::run
