// The composite transport behind transport.name = "auto": shared memory to
// peers on this host, a fabric to peers on other hosts, chosen per peer.
//
// It lives inside the core but is driven exactly like a loaded plugin:
// auto_transport_plugin() returns a Plugin whose table is the composite, and
// the communicator calls its ops through the ABI of <chorus/transport.h>.
// The composite loads its two sub-transports (transport.auto.local, default
// "shm", and transport.auto.fabric, default "tcp") with the ordinary plugin
// loader when a context is opened, so each keeps its own plugin file,
// settings and conformance.
//
// Per-peer choice without an extra bootstrap round: endpoint_open opens an
// endpoint in both sub-contexts and writes one blob holding this rank's host
// identity and both sub-blobs; endpoint_connect compares the two identities
// and both sides reach the same answer (equal: local, else fabric), then
// connect the chosen sub-endpoint and close the other.
#pragma once

#include <chorus/transport.h>

#include "core/config.h"
#include "core/plugin_loader.h"
#include "core/status.h"

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace chorus::core {

/// The transport.name that selects the composite.
inline constexpr const char* kAutoTransportName = "auto";

/// The composite's ops table (name "auto"). Its context_open reads, from
/// `info->config`: `local` and `fabric` (sub-transport names), `host_id`
/// (overrides the computed identity), `plugin_path` (extra plugin folders,
/// ':'-separated) and `<sub>.<key>` entries, handed on to sub-transport `<sub>`
/// as `<key>`. Anything else is refused by name.
const chorus_transport_plugin_v1_t* auto_transport_table();

/// How many wait helper threads auto contexts of this process have started
/// (one per context that ever slept on two sub-contexts of which one has no
/// wait object). For tests.
int auto_transport_helper_threads();

/// A Plugin object for the composite (no shared object behind it). Shared by
/// every communicator of the process.
std::shared_ptr<Plugin> auto_transport_plugin();

/// The composite's context settings for `cfg`: transport.auto.*, every
/// transport.<local>.* and transport.<fabric>.* setting prefixed with its
/// sub-transport's name, and the configured plugin_path.
std::vector<Setting> auto_transport_settings(const Config& cfg);

/// The sub-transport names `cfg` selects: {local, fabric}.
std::pair<std::string, std::string> auto_transport_names(const Config& cfg);

/// Whether `cfg` sets transport.auto.local. When it does not, a local
/// sub-transport that is missing or refused makes every peer go over the
/// fabric (with a warning) instead of failing init.
bool auto_local_is_explicit(const Config& cfg);

/// For a context of the composite: which sub-transport serves which peers,
/// by connected endpoint and auto_transport_plan. Entries in order local, fabric; a peer with
/// several channels is listed once. Never blocks; call it from the context's thread.
std::vector<std::pair<std::string, std::vector<int>>> auto_transport_peers(
    chorus_tp_context_t* ctx);

/// Records which sub-transport endpoint `ep`'s connect will choose, from its
/// peer's auto address (the same rule as endpoint_connect), and closes the
/// other sub-endpoint: for pairs left for their first use (P10), so that
/// auto_transport_peers lists their peers and an unused sub-context is not
/// polled or slept on. An address that does not decode is ignored.
void auto_transport_plan(chorus_tp_endpoint_t* ep, std::span<const std::byte> address);

/// [peer]: 1 when the sub-transport serving that peer carries immediates
/// (post_send_imm, CHORUS_TP_CAP_IMM_DATA); 0 for itself and unknown peers.
std::vector<char> auto_transport_peer_imm(chorus_tp_context_t* ctx, int size);

/// "shm to ranks 1..3; tcp to ranks 4,6" (or "no peers") from auto_transport_peers.
std::string auto_transport_summary(
    const std::vector<std::pair<std::string, std::vector<int>>>& peers);

// ---- pure pieces, exposed for unit tests ----------------------------------------

/// This process's host identity: boot id, host name, and the inodes of its
/// network and pid namespaces and the device of /dev/shm. Two processes share
/// shared memory only if every part is equal; a different network namespace
/// counts as a different host (that is how tests/netns models hosts).
std::string auto_host_identity();

/// "1..3,5" style list of ranks (sorted, distinct); runs of three or more are
/// collapsed.
std::string auto_rank_list(const std::vector<int>& ranks);

/// The parts of an address blob of the composite.
struct AutoBlob {
  std::string host_id;
  std::string local_name;
  std::string fabric_name;
  std::vector<std::byte> local;
  std::vector<std::byte> fabric;
};

/// Largest host identity a blob carries.
inline constexpr std::size_t kAutoMaxHostId = 255;
/// Bytes a blob adds to its two sub-blobs, at most.
std::size_t auto_blob_overhead();

/// Serialises `blob` (little-endian, versioned; docs/shm.md "transport.name =
/// auto"). Fails when a field is too long.
Result<std::vector<std::byte>> auto_blob_encode(const AutoBlob& blob);
/// Parses a blob; fails with INVALID_ARGUMENT on anything malformed.
Result<AutoBlob> auto_blob_decode(std::span<const std::byte> data);

/// Which sub-transport a pair of ranks uses: true for local. Both sides call
/// it with the arguments swapped and get the same answer.
inline bool auto_use_local(const std::string& my_host_id, const std::string& peer_host_id) {
  return my_host_id == peer_host_id;
}

}  // namespace chorus::core
