// Bootstrapping through a host-provided all-gather instead of a known
// coordinator address (Config::set_all_gather / set_all_gather_factory).
#ifndef JACCL_SRC_RENDEZVOUS_H_
#define JACCL_SRC_RENDEZVOUS_H_

#include <jaccl/jaccl.h>

#include <string>

namespace jaccl::detail {

/// What every rank needs to join the same Chorus job.
struct Rendezvous {
  std::string coordinator;  ///< "host:port" where rank 0's side channel will listen
  std::string job_token;    ///< identifies the job on that side channel
};

/// Collective over `all_gather`'s ranks. Rank 0 picks a free port on
/// CHORUS_BIND_ADDRESS (default 127.0.0.1) and a random job token; every rank
/// returns rank 0's choice. The port is released before Chorus binds it, so
/// another process could take it in between: init then fails and can be
/// retried. Throws std::runtime_error on failure.
Rendezvous rendezvous_over(const AllGatherFn& all_gather, int rank, int size);

}  // namespace jaccl::detail

#endif  // JACCL_SRC_RENDEZVOUS_H_
