// chorusrun: the one-host launcher. `chorusrun -n N PROGRAM ARGS...`
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <iostream>

#include "tools/chorusrun/exit_codes.h"
#include "tools/chorusrun/job_environment.h"
#include "tools/chorusrun/launcher.h"
#include "tools/chorusrun/options.h"
#include "tools/chorusrun/output_stream.h"

namespace chorus::run {
namespace {

// With 0, 1 or 2 closed at start-up the ranks' pipes could land on them and
// chorusrun's own output would go into a pipe; park /dev/null there instead.
void ensure_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0) {
      const int opened = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (opened >= 0 && opened != fd) ::close(opened);
    }
  }
}

JobSpec make_job_spec(const Options& options) {
  JobSpec spec;
  spec.command = options.command;
  spec.prefix_output = options.prefix_output;
  spec.grace = Seconds(options.grace_seconds);
  if (options.timeout_seconds) spec.timeout = Seconds(*options.timeout_seconds);

  JobEnvironment& job = spec.environment;
  job.world_size = options.ranks;
  job.extra = options.env;
  job.coordinator =
      options.coordinator ? *options.coordinator : fmt::format("127.0.0.1:{}", pick_free_port());
  // A token chosen by whoever started chorusrun wins (--env, then the
  // environment), so that hand-started processes can join the job.
  for (const auto& assignment : options.env) {
    if (assignment.starts_with(kJobTokenVar) && assignment.size() > kJobTokenVar.size() &&
        assignment[kJobTokenVar.size()] == '=') {
      job.job_token = assignment.substr(kJobTokenVar.size() + 1);
    }
  }
  if (job.job_token.empty()) {
    const char* inherited = std::getenv(std::string(kJobTokenVar).c_str());
    job.job_token = inherited && *inherited ? inherited : make_job_token();
  }
  return spec;
}

}  // namespace
}  // namespace chorus::run

int main(int argc, char** argv) {
  using namespace chorus::run;
  ensure_standard_fds();
  const CommandLine command_line = parse_command_line(argc, argv, std::cout, std::cerr);
  if (!command_line.options) return command_line.exit_code;

  // A reader of chorusrun's output going away must not kill chorusrun (the
  // ranks still have to be stopped and reaped); writes then fail with EPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  OutputStream out(STDOUT_FILENO);
  OutputStream err(STDERR_FILENO);
  try {
    return run_job(make_job_spec(*command_line.options), out, err);
  } catch (const std::exception& e) {
    err.write(fmt::format("chorusrun: {}\n", e.what()));
    return kExitLaunchFailure;
  }
}
