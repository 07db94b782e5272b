// Starting one rank: fork, wire its output to pipes, exec PROGRAM.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "tools/chorusrun/unique_fd.h"

namespace chorus::run {

/// A started rank. `pid` is also the id of the process group the rank leads,
/// which is what chorusrun signals, so that whatever the rank started
/// (a shell's children, helpers) is stopped with it.
struct RankProcess {
  pid_t pid = -1;
  UniqueFd stdout_fd;  ///< Read end of the rank's stdout; non-blocking.
  UniqueFd stderr_fd;  ///< Read end of the rank's stderr; non-blocking.
};

/// Process state that chorusrun changed for its own needs and each rank
/// gets back as chorusrun found it.
struct ChildSetup {
  sigset_t signal_mask{};  ///< chorusrun blocks what it reads through signalfd.
  rlimit open_files{};     ///< chorusrun may raise RLIMIT_NOFILE for its pipes.
};

/// Forks and execs `argv` (searched in the PATH of `env`) with environment
/// `env`, stdin from /dev/null, stdout and stderr to fresh pipes, in a
/// process group of its own, and with PR_SET_PDEATHSIG so that it is
/// SIGKILLed if chorusrun dies without cleaning up. The child starts with
/// `setup`'s signal mask and open-files limit, and default SIGPIPE.
///
/// If exec fails, the child writes "chorusrun: cannot run 'PROG': <reason>"
/// to its stderr (so it arrives prefixed with its rank) and exits 127.
/// Blocks only for fork. Throws std::system_error if a pipe or fork fails.
RankProcess spawn_rank(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                       const ChildSetup& setup);

}  // namespace chorus::run
