#include "tools/chorusrun/options.h"

#include <CLI/CLI.hpp>

#include <ostream>

#include "tools/chorusrun/exit_codes.h"
#include "tools/chorusrun/job_environment.h"

#ifndef CHORUSRUN_VERSION
#define CHORUSRUN_VERSION "unknown"
#endif

namespace chorus::run {
namespace {

// Longer than any sane job, short enough that a deadline computed from it
// stays far inside steady_clock's range.
constexpr double kMaxSeconds = 1e9;

constexpr const char* kDescription =
    "Start N ranks of a Chorus program on this host and relay their output.";

constexpr const char* kFooter = R"(Environment of every rank:
  CHORUS_RANK          0 .. N-1, distinct for each rank
  CHORUS_WORLD_SIZE    N
  CHORUS_COORDINATOR   HOST:PORT where rank 0 listens: --coordinator, or
                       127.0.0.1 and a TCP port that was free at start-up
  CHORUS_JOB_TOKEN     secret authenticating the job's connections: kept if
                       set in chorusrun's environment or by --env, else 128
                       random bits as 32 hex digits
This is the launch contract: processes started by any other means with these
variables set the same way form a job just as well. The rest of chorusrun's
environment is passed on, then --env applied. PROGRAM is searched in PATH.
Ranks read stdin from /dev/null.

Output: every line a rank writes to stdout or stderr goes to chorusrun's
stdout or stderr as a whole line, prefixed "[RANK] " unless --no-prefix:
lines of different ranks never mix. A last line without newline gets one.

Stopping: when a rank exits non-zero or is killed by a signal, chorusrun says
which and how on stderr, sends SIGTERM to the other ranks and SIGKILL to
those still running after --grace seconds. SIGINT, SIGTERM and SIGHUP sent
to chorusrun are forwarded to the ranks the same way; a second one sends
SIGKILL at once. Each rank leads a process group, and these signals go to the
whole group; whatever is left in those groups once every rank has exited is
killed. Ranks are killed if chorusrun itself dies.

Exit status:
  0      every rank exited 0
  S      the first failing rank's exit status S, or 128+SIG if it was
         killed by signal SIG (127: PROGRAM could not be run)
  124    --timeout expired
  125    chorusrun itself failed (e.g. could not fork)
  128+S  chorusrun received signal S and forwarded it
  2      bad usage

Example:
  chorusrun -n 4 --timeout 600 -- ./train --epochs 3)";

// CLI11 would print "Usage: chorusrun [OPTIONS]"; ours takes a command too.
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string name) const override {
    return "Usage: " + name + " -n N [OPTIONS] [--] PROGRAM [ARGS...]\n";
  }
};

int usage_error(std::ostream& err, const std::string& message) {
  err << "chorusrun: " << message << "\nRun 'chorusrun --help' for usage.\n";
  return kExitUsage;
}

}  // namespace

CommandLine parse_command_line(int argc, const char* const* argv, std::ostream& out,
                               std::ostream& err) {
  Options o;
  std::string coordinator;
  double timeout = 0;
  bool no_prefix = false;

  CLI::App app{kDescription, "chorusrun"};
  app.formatter(std::make_shared<Formatter>());
  app.get_formatter()->column_width(28);
  app.footer(kFooter);
  // Everything from the first argument that is not one of ours (or from
  // "--") is PROGRAM ARGS, so "chorusrun -n 2 sh -c ..." leaves -c to sh.
  app.prefix_command();
  app.set_version_flag("--version", "chorusrun (Chorus) " CHORUSRUN_VERSION);
  app.add_option("-n,--ranks", o.ranks, "Number of ranks to start (1-4096)")
      ->required()
      ->type_name("N");
  app.add_option("--coordinator", coordinator,
                 "Address rank 0 listens on (default 127.0.0.1:<free port>)")
      ->type_name("HOST:PORT");
  app.add_option("--env", o.env, "Add NAME=VALUE to every rank's environment; repeatable")
      ->type_name("NAME=VALUE")
      ->allow_extra_args(false);
  app.add_flag("--no-prefix", no_prefix, "Relay output lines without the \"[RANK] \" prefix");
  app.add_option("--grace", o.grace_seconds,
                 "Seconds from SIGTERM to SIGKILL when stopping ranks (default 5)")
      ->type_name("SECONDS");
  app.add_option("--timeout", timeout, "Stop the whole job after SECONDS and exit 124")
      ->type_name("SECONDS");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    app.exit(e, out, err);
    return {std::nullopt, 0};
  } catch (const CLI::ParseError& e) {
    return {std::nullopt, usage_error(err, e.what())};
  }

  if (o.ranks < 1 || o.ranks > kMaxRanks) {
    return {std::nullopt, usage_error(err, "-n must be between 1 and " + std::to_string(kMaxRanks) +
                                               ", not " + std::to_string(o.ranks))};
  }
  if (!(o.grace_seconds >= 0 && o.grace_seconds <= kMaxSeconds)) {
    return {std::nullopt, usage_error(err, "--grace must be a number of seconds >= 0")};
  }
  if (app.count("--timeout") > 0) {
    if (!(timeout > 0 && timeout <= kMaxSeconds)) {
      return {std::nullopt, usage_error(err, "--timeout must be a number of seconds > 0")};
    }
    o.timeout_seconds = timeout;
  }
  if (app.count("--coordinator") > 0) {
    if (auto problem = check_coordinator(coordinator)) {
      return {std::nullopt, usage_error(err, *problem)};
    }
    o.coordinator = coordinator;
  }
  for (const auto& assignment : o.env) {
    if (auto problem = check_env_assignment(assignment)) {
      return {std::nullopt, usage_error(err, *problem)};
    }
  }
  o.prefix_output = !no_prefix;

  o.command = app.remaining();
  if (!o.command.empty() && o.command.front() == "--") {
    o.command.erase(o.command.begin());
  } else if (!o.command.empty() && o.command.front().size() > 1 &&
             o.command.front().front() == '-') {
    // CLI11 hands back options it does not know as "remaining" too.
    return {std::nullopt, usage_error(err, "unknown option '" + o.command.front() +
                                               "' (put -- before a PROGRAM starting with -)")};
  }
  if (o.command.empty()) return {std::nullopt, usage_error(err, "no PROGRAM to run")};
  return {std::move(o), 0};
}

}  // namespace chorus::run
