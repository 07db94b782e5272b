// The environment contract between chorusrun and the ranks it starts.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::run {

// The documented contract: ranks started by any means with these variables
// (same world size, coordinator and token; distinct ranks) form one job.
inline constexpr std::string_view kRankVar = "CHORUS_RANK";
inline constexpr std::string_view kWorldSizeVar = "CHORUS_WORLD_SIZE";
inline constexpr std::string_view kCoordinatorVar = "CHORUS_COORDINATOR";
inline constexpr std::string_view kJobTokenVar = "CHORUS_JOB_TOKEN";

/// What every rank of one job shares.
struct JobEnvironment {
  int world_size = 0;
  std::string coordinator;         ///< HOST:PORT where rank 0 listens.
  std::string job_token;           ///< Secret that authenticates the job's connections.
  std::vector<std::string> extra;  ///< K=V from --env, in order; a later K wins.
};

/// 128 random bits from getrandom(2), as 32 lowercase hex digits.
/// Throws std::system_error if the kernel cannot supply them.
std::string make_job_token();

/// A TCP port on 127.0.0.1 that is free now. It is drawn at random below the
/// kernel's ephemeral range (ip_local_port_range), where no outgoing
/// connection can take it, and checked by binding it; when that range is too
/// small, port 0 is bound and read back. Another process may still bind it
/// before rank 0 does: that shows up as rank 0 failing to listen, never as a
/// mixed-up job (the job token tells jobs apart).
/// Throws std::system_error on socket failures.
std::uint16_t pick_free_port();

/// Checks "HOST:PORT" (HOST non-empty, may be "[v6]"; PORT 1..65535).
/// Returns a message saying what is wrong, or nothing when it is valid.
std::optional<std::string> check_coordinator(std::string_view address);

/// Checks one --env argument: "K=V" with a non-empty K that is not one of the
/// variables chorusrun owns (rank, world size, coordinator).
std::optional<std::string> check_env_assignment(std::string_view assignment);

/// The environment of rank `rank`: `base` (chorusrun's own environment)
/// without the variables the job sets, then `job.extra`, then the four
/// contract variables. Each name appears once.
std::vector<std::string> rank_environment(std::span<const std::string> base,
                                          const JobEnvironment& job, int rank);

}  // namespace chorus::run
