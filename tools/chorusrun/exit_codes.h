// chorusrun's own exit codes; a failing rank's code is passed on unchanged.
#pragma once

namespace chorus::run {

inline constexpr int kExitUsage = 2;            ///< Bad command line.
inline constexpr int kExitTimeout = 124;        ///< --timeout expired, as timeout(1).
inline constexpr int kExitLaunchFailure = 125;  ///< chorusrun itself failed, as timeout(1), env(1).
inline constexpr int kExitCannotRun = 127;      ///< PROGRAM could not be executed, as shells.

}  // namespace chorus::run
