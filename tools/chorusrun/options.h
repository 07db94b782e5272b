// chorusrun's command line.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace chorus::run {

/// Upper bound on -n: each rank costs two pipes and a process on one host.
inline constexpr int kMaxRanks = 4096;

struct Options {
  int ranks = 0;
  std::vector<std::string> command;        ///< PROGRAM ARGS..., never empty.
  std::vector<std::string> env;            ///< NAME=VALUE from --env, validated.
  std::optional<std::string> coordinator;  ///< HOST:PORT, validated.
  bool prefix_output = true;
  double grace_seconds = 5.0;
  std::optional<double> timeout_seconds;
};

/// Either options to run with, or the exit code to end with right away
/// (0 after --help/--version, kExitUsage after a usage error).
struct CommandLine {
  std::optional<Options> options;
  int exit_code = 0;
};

/// Parses `chorusrun [OPTIONS] [--] PROGRAM [ARGS...]`. Option parsing stops
/// at PROGRAM (or `--`), so the program's own options pass through untouched.
/// Help and version text go to `out`; a usage error is written to `err` as
/// "chorusrun: <what is wrong>" plus a pointer to --help.
CommandLine parse_command_line(int argc, const char* const* argv, std::ostream& out,
                               std::ostream& err);

}  // namespace chorus::run
