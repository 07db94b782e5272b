// Running one job: start the ranks, relay their output, stop them together.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "tools/chorusrun/job_environment.h"
#include "tools/chorusrun/output_stream.h"

namespace chorus::run {

using Seconds = std::chrono::duration<double>;

struct JobSpec {
  std::vector<std::string> command;  ///< PROGRAM ARGS...; PROGRAM is searched in PATH.
  JobEnvironment environment;        ///< world_size is the number of ranks started.
  bool prefix_output = true;         ///< Put "[RANK] " in front of every output line.
  Seconds grace{5.0};                ///< From SIGTERM to SIGKILL when stopping the job.
  std::optional<Seconds> timeout;    ///< Whole-job wall-clock limit.
};

/// Starts spec.environment.world_size ranks of spec.command, relays their
/// output line by line to `out` / `err`, and returns when every rank has
/// exited. Policy: the first rank to fail (non-zero exit or signal) is
/// reported on `err` and the others get SIGTERM, then SIGKILL after
/// spec.grace; SIGINT/SIGTERM/SIGHUP sent to chorusrun are forwarded the
/// same way, and a second one escalates to SIGKILL.
///
/// Returns chorusrun's exit code: 0 when all ranks exited 0, else the first
/// failure's (a rank's status, 128+signal, kExitTimeout, kExitLaunchFailure).
///
/// Blocks. Must run on chorusrun's only thread: it blocks the signals it
/// handles in the calling thread and forks. Throws std::system_error if
/// polling or signal setup fails.
int run_job(const JobSpec& spec, OutputStream& out, OutputStream& err);

}  // namespace chorus::run
