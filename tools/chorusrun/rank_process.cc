#include "tools/chorusrun/rank_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

extern char** environ;

namespace chorus::run {
namespace {

[[noreturn]] void throw_errno(const char* what) {
  throw std::system_error(errno, std::generic_category(), what);
}

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

// Both ends close on exec: a rank must not hold the pipes of other ranks, or
// their EOF would wait for it. The child dup2()s its write end onto 1 or 2,
// which clears the flag on that copy only.
Pipe make_output_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe2");
  Pipe p{UniqueFd(fds[0]), UniqueFd(fds[1])};
  // The event loop reads only what poll() announced and must never stall on
  // one rank while others have output waiting.
  const int flags = ::fcntl(p.read.get(), F_GETFL);
  if (flags < 0 || ::fcntl(p.read.get(), F_SETFL, flags | O_NONBLOCK) != 0) throw_errno("fcntl");
  return p;
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Runs in the child between fork and exec. chorusrun is single-threaded, so
// no other thread can hold a libc lock at fork time and formatting the error
// message here is safe.
[[noreturn]] void exec_rank(char* const* argv, char** envp, int dev_null, int out, int err,
                            pid_t parent, const ChildSetup& setup) {
  // Own group first, so that a kill of the group issued by the parent right
  // after fork() already reaches this process.
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent may have died before prctl() took effect; nobody would ever
  // kill us then.
  if (::getppid() != parent) ::raise(SIGKILL);

  if (::dup2(dev_null, STDIN_FILENO) < 0 || ::dup2(out, STDOUT_FILENO) < 0 ||
      ::dup2(err, STDERR_FILENO) < 0) {
    ::_exit(127);
  }
  // chorusrun ignores SIGPIPE, blocks the signals it reads via signalfd and
  // may have raised its fd limit; all three survive exec, so undo them.
  ::signal(SIGPIPE, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &setup.signal_mask, nullptr);
  ::setrlimit(RLIMIT_NOFILE, &setup.open_files);

  // execvp() searches the PATH of the current environment; switching to the
  // rank's first makes --env PATH=... apply to the search, as env(1) does.
  environ = envp;
  ::execvp(argv[0], argv);

  const int error = errno;
  const std::string message =
      fmt::format("chorusrun: cannot run '{}': {}\n", argv[0], ::strerror(error));
  [[maybe_unused]] const ssize_t ignored = ::write(STDERR_FILENO, message.data(), message.size());
  ::_exit(127);
}

}  // namespace

RankProcess spawn_rank(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                       const ChildSetup& setup) {
  // Everything the child needs is prepared before fork().
  const auto c_argv = c_strings(argv);
  const auto c_env = c_strings(env);
  UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null) throw_errno("open /dev/null");
  Pipe out = make_output_pipe();
  Pipe err = make_output_pipe();
  const pid_t parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) throw_errno("fork");
  if (pid == 0) {
    exec_rank(c_argv.data(), const_cast<char**>(c_env.data()), dev_null.get(), out.write.get(),
              err.write.get(), parent, setup);
  }
  // Also from the parent, so the group exists before we could signal it,
  // whichever process runs first. EACCES (the child has already exec'd and
  // set it itself) is harmless.
  ::setpgid(pid, pid);
  return RankProcess{pid, std::move(out.read), std::move(err.read)};
}

}  // namespace chorus::run
