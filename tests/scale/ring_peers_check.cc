// One rank of the ring-only scale guard (tests/scale/ring_peers.sh), run
// under chorusrun:
//   ring_peers_check [--ring | --mesh | --declared] [--untagged] [--channels C]
// --ring pins every collective to the ring, whose algorithm declares
// CHORUS_ALGO_PEERS_RING, so the communicator has data endpoints to rank-1
// and rank+1 only; without it the configuration is the default (`auto`:
// ring and mesh, so every peer). --untagged sets point_to_point.tagged =
// false, whose send/recv posts on data channel 0 to any peer: every peer is
// connected then, ring or not, and a checked send/recv with the rank half
// the ring away shows it. --mesh pins all_gather to the mesh (which
// declares every peer) and all_reduce to the ring: the data endpoints to
// every peer are opened, but only the ring neighbours' are connected until
// the first mesh all_gather, which connects the rest; the counters are
// checked before and after it, and its result element by element (untagged:
// every peer is connected at init); then two ring broadcasts from rank 0,
// after which the notice endpoints connected are the ring neighbours' and
// the root's pairs (over tcp, shm, ofi and verbs, which connect them on first use).
// --declared pins every collective to the ring but all_to_all to the mesh
// (never called): every peer is declared, so the data and notice endpoints
// to every peer are opened, and only the ring neighbours' are connected.
// On every rank it checks the endpoint counters against the counts the
// rule gives, runs a ring all_reduce checked
// element by element against a closed-form reference, does the same on the
// two halves of a split, and counts its open file descriptors. Rank 0 prints
//   ring_peers: ranks N channels C mode ring|mesh|declared|default[+untagged] fds rank0 A others
//   min B max C
//               endpoints data+notice D p2p_connected P
// and every rank prints each failed check as "rN FAIL ...". Exit status 0
// only when every check passed on this rank.
#include <chorus/chorus.hpp>

#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

int g_rank = -1;
int g_failed = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::printf("r%d FAIL %s\n", g_rank, what.c_str());
  ++g_failed;
}

std::map<std::string, uint64_t> counters(const chorus::Communicator& c) {
  std::map<std::string, uint64_t> m;
  for (auto& [k, v] : c.counters()) m[k] = v;
  return m;
}

/// Entries of /proc/self/fd, less the one the listing itself holds open.
long open_fds() {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  long n = 0;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n - 1;
}

/// Whether tagged pairs connect on first use: as the run says
/// (TAGGED_LAZY_EXPECT=1 or 0: auto, whose sub-transports decide it), else
/// tcp, shm, ofi and verbs, which declare CHORUS_TP_CAP_CONNECT_POLL (CHORUS_TRANSPORT
/// is how chorusrun's callers here choose it).
bool p2p_lazy() {
  if (const char* e = std::getenv("TAGGED_LAZY_EXPECT")) return std::strcmp(e, "1") == 0;
  const char* t = std::getenv("CHORUS_TRANSPORT");
  return t != nullptr && (std::strcmp(t, "tcp") == 0 || std::strcmp(t, "shm") == 0 ||
                          std::strcmp(t, "ofi") == 0 || std::strcmp(t, "verbs") == 0);
}

/// The endpoint counters of `comm` against what its rule gives; `what` names
/// the communicator in failures. `all_connected`: the data endpoints to
/// every data peer are connected by now (else those to the ring neighbours
/// only, when tagged point-to-point leaves the rest for first use).
void check_endpoints(const chorus::Communicator& comm, bool ring, bool tagged, int channels,
                     const std::string& what, bool all_connected = true) {
  auto c = counters(comm);
  const uint64_t n = uint64_t(comm.size());
  const uint64_t others = n - 1;
  ring = ring && tagged;
  // The ring's neighbours rank-1 and rank+1 are one peer at 2 ranks.
  const uint64_t neighbours = std::min<uint64_t>(2, others);
  const uint64_t peers = ring ? neighbours : others;
  const uint64_t connected = all_connected || !tagged ? peers : neighbours;
  // A mesh's notice endpoints to non-neighbours connect with its data
  // endpoints, or before when a signature needs them (docs/scale.md), over
  // a transport with polled connects; no call before these checks sends one.
  const uint64_t notices = tagged && p2p_lazy() ? connected : peers;
  const std::pair<const char*, uint64_t> want[] = {
      {"endpoints.data", peers * uint64_t(channels)},
      {"endpoints.data_peers", peers},
      {"endpoints.data_connected", connected * uint64_t(channels)},
      // Notice endpoints go to the ring neighbours and the data peers only.
      {"endpoints.notice", peers},
      {"endpoints.notice_connected", notices},
      {"endpoints.point_to_point", tagged ? 2 * others : 0},
      // No tagged operation ran: over tcp (pairs connected on first use) no
      // pair is connected; a transport that connects them at init has all.
      {"endpoints.p2p_connected", tagged && !p2p_lazy() ? others : 0},
  };
  for (const auto& [name, value] : want) {
    auto it = c.find(name);
    expect(it != c.end() && it->second == value,
           what + ": " + name + " is " +
               (it == c.end() ? std::string("missing") : std::to_string(it->second)) +
               ", expected " + std::to_string(value));
  }
  // The scale guard proper: from 4 ranks up a ring-only rank's data and
  // notice endpoints are 2 x channels + 2 whatever N is.
  if (ring && n >= 4)
    expect(c["endpoints.data"] + c["endpoints.notice"] == 2 * uint64_t(channels) + 2,
           what + ": data + notice endpoints are " +
               std::to_string(c["endpoints.data"] + c["endpoints.notice"]) + " at " +
               std::to_string(n) + " ranks, expected 2 x channels + 2 = " +
               std::to_string(2 * channels + 2) + " at any size");
}

uint64_t data_and_notice(const chorus::Communicator& comm) {
  auto c = counters(comm);
  return c["endpoints.data"] + c["endpoints.notice"];
}

/// A ring all_reduce of int64 sums, checked against the closed form, and
/// counted as one more ops.all_reduce.ring.
void checked_all_reduce(chorus::Communicator& comm, const std::string& what) {
  const size_t count = 100003;  // not a multiple of any rank count used
  const int64_t r = comm.rank(), n = comm.size();
  std::vector<int64_t> in(count), out(count, -1);
  for (size_t i = 0; i < count; ++i) in[i] = int64_t(i) * 1000 + r;
  const uint64_t before = counters(comm)["ops.all_reduce.ring"];
  comm.all_reduce(in.data(), out.data(), count);
  // sum over ranks q of (1000 i + q) = 1000 i n + n (n - 1) / 2
  size_t wrong = 0, first = count;
  for (size_t i = 0; i < count; ++i)
    if (out[i] != int64_t(i) * 1000 * n + n * (n - 1) / 2) {
      if (wrong++ == 0) first = i;
    }
  expect(wrong == 0, what + ": all_reduce: " + std::to_string(wrong) +
                         " wrong elements, the first at " + std::to_string(first));
  expect(counters(comm)["ops.all_reduce.ring"] == before + 1,
         what + ": the all_reduce did not run the ring algorithm");
}

/// Untagged send/recv with the rank half the ring away (never a neighbour
/// from 5 ranks up), checked element by element.
void checked_far_send(chorus::Communicator& comm) {
  const int n = comm.size(), r = comm.rank(), far = (r + n / 2) % n;
  if (n < 2 || n % 2) return;  // pairs (r, r + n/2) need an even size
  std::vector<int32_t> out(1003), in(1003, -1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = int32_t(i) * 7 + r;
  // The lower rank of each pair sends first, the higher receives first.
  if (r < far) {
    comm.send(out.data(), out.size(), far);
    comm.recv(in.data(), in.size(), far);
  } else {
    comm.recv(in.data(), in.size(), far);
    comm.send(out.data(), out.size(), far);
  }
  size_t wrong = 0;
  for (size_t i = 0; i < in.size(); ++i) wrong += in[i] != int32_t(i) * 7 + far;
  expect(wrong == 0, "untagged recv from rank " + std::to_string(far) + ": " +
                         std::to_string(wrong) + " wrong elements");
}

/// A mesh all_gather of int32 (count per rank, not a multiple of anything
/// used), every element of every rank's block checked, and counted as one
/// more ops.all_gather.mesh.
void checked_mesh_all_gather(chorus::Communicator& comm, const std::string& what) {
  const size_t count = 4099;
  const int n = comm.size(), r = comm.rank();
  std::vector<int32_t> in(count), out(count * size_t(n), -1);
  for (size_t i = 0; i < count; ++i) in[i] = int32_t(i) * 31 + r * 1000003;
  const uint64_t before = counters(comm)["ops.all_gather.mesh"];
  comm.all_gather(in.data(), out.data(), count);
  size_t wrong = 0, first = out.size();
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i)
      if (out[size_t(q) * count + i] != int32_t(i) * 31 + q * 1000003) {
        if (wrong++ == 0) first = size_t(q) * count + i;
      }
  expect(wrong == 0, what + ": mesh all_gather: " + std::to_string(wrong) +
                         " wrong elements, the first at " + std::to_string(first));
  expect(counters(comm)["ops.all_gather.mesh"] == before + 1,
         what + ": the all_gather did not run the mesh algorithm");
}

/// A ring broadcast of int32 from `root`, every element checked on every rank.
void checked_broadcast(chorus::Communicator& comm, int root, const std::string& what) {
  const size_t count = 3001;
  std::vector<int32_t> buf(count, -1);
  if (comm.rank() == root)
    for (size_t i = 0; i < count; ++i) buf[i] = int32_t(i) * 13 + root * 7919;
  comm.broadcast(buf.data(), count, root);
  size_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += buf[i] != int32_t(i) * 13 + root * 7919;
  expect(wrong == 0, what + ": broadcast from rank " + std::to_string(root) + ": " +
                         std::to_string(wrong) + " wrong elements");
}

/// After broadcasts from rank 0 on a mesh communicator: where notice
/// endpoints connect on first use, the root's to every rank are connected
/// (it hears every rank's signature) and each other rank's to the root, on
/// top of the ring neighbours'; elsewhere every notice endpoint from init.
void check_notices_after_broadcast(const chorus::Communicator& comm, bool tagged,
                                   const std::string& what) {
  const int n = comm.size(), r = comm.rank();
  const uint64_t others = uint64_t(n - 1);
  const uint64_t neighbours = std::min<uint64_t>(2, others);
  const bool next_to_root = r == 1 || r == n - 1;
  uint64_t want = others;
  if (tagged && p2p_lazy()) want = r == 0 ? others : neighbours + (next_to_root ? 0 : 1);
  const uint64_t got = counters(comm)["endpoints.notice_connected"];
  expect(got == want, what + ": endpoints.notice_connected is " + std::to_string(got) +
                          " after broadcasts from rank 0, expected " + std::to_string(want));
}

/// --mesh: ring neighbours only until the first mesh call, every peer after.
void check_mesh_on_first_use(chorus::Communicator& comm, bool tagged, int channels,
                             const std::string& what) {
  check_endpoints(comm, false, tagged, channels, what + " (before any call)", false);
  checked_all_reduce(comm, what);
  check_endpoints(comm, false, tagged, channels, what + " (after a ring call)", false);
  // No rank starts the broadcast below (whose root connects its notice
  // endpoints, which a peer may answer between calls) before every rank checked.
  comm.barrier();
  // A broadcast's root must hear from every rank (a rank that called it with
  // another root tells it only so): its notice endpoints connect then.
  for (int k = 0; k < 2; ++k) checked_broadcast(comm, 0, what);
  check_notices_after_broadcast(comm, tagged, what);
  // Timed after a (ring) barrier: the first mesh call connects, the second not.
  double ms[2];
  for (int k = 0; k < 2; ++k) {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    checked_mesh_all_gather(comm, what + (k ? " (again)" : ""));
    ms[k] =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (k == 0) check_endpoints(comm, false, tagged, channels, what + " (after a mesh call)", true);
  }
  if (comm.rank() == 0)
    std::printf("ring_peers: %s: first mesh all_gather %.2f ms, second %.2f ms (rank 0)\n",
                what.c_str(), ms[0], ms[1]);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  bool ring = false, mesh = false, declared = false, tagged = true;
  int channels = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ring") == 0) {
      ring = true;
    } else if (std::strcmp(argv[i], "--mesh") == 0) {
      mesh = true;
    } else if (std::strcmp(argv[i], "--declared") == 0) {
      declared = true;
    } else if (std::strcmp(argv[i], "--untagged") == 0) {
      tagged = false;
    } else if (std::strcmp(argv[i], "--channels") == 0 && i + 1 < argc) {
      channels = std::atoi(argv[++i]);
    } else {
      std::fprintf(
          stderr,
          "usage: ring_peers_check [--ring | --mesh | --declared] [--untagged] [--channels C]\n");
      return 2;
    }
  }
  std::vector<std::string> settings = {"algorithm.channels=" + std::to_string(channels)};
  if (!tagged) settings.push_back("point_to_point.tagged=false");
  if (ring) {
    for (const char* c : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier",
                          "reduce", "gather", "scatter", "all_to_all", "all_to_allv"})
      settings.push_back(std::string("algorithm.") + c + "=\"ring\"");
  } else if (mesh) {
    // Every call pinned, so that none but the checked all_gather is a mesh.
    for (const char* c : {"all_reduce", "reduce_scatter", "broadcast", "barrier", "reduce",
                          "gather", "scatter", "all_to_all", "all_to_allv"})
      settings.push_back(std::string("algorithm.") + c + "=\"ring\"");
    settings.push_back("algorithm.all_gather=\"mesh\"");
  } else if (declared) {
    // Every peer declared (all_to_all on the mesh, never called here), every
    // call made on the ring: nothing but the ring neighbours gets connected.
    for (const char* c : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier",
                          "reduce", "gather", "scatter", "all_to_allv"})
      settings.push_back(std::string("algorithm.") + c + "=\"ring\"");
    settings.push_back("algorithm.all_to_all=\"mesh\"");
  } else {
    settings.push_back("algorithm.all_reduce=\"ring\"");  // checked below; the rest stay auto
  }
  std::vector<const char*> ptrs;
  for (const auto& s : settings) ptrs.push_back(s.c_str());
  chorus_options_t o;
  chorus_options_init(&o);
  o.settings = ptrs.data();
  o.settings_count = ptrs.size();
  try {
    chorus::Communicator comm(&o);
    g_rank = comm.rank();
    const int n = comm.size();
    if (mesh) {
      check_mesh_on_first_use(comm, tagged, channels, "world");
    } else {
      check_endpoints(comm, ring, tagged, channels, "world", false);
      checked_all_reduce(comm, "world");
    }
    if (!tagged) checked_far_send(comm);

    // Split children follow the same rule: two halves, each a ring.
    if (n >= 4) {
      chorus::Communicator half = comm.split(comm.rank() < n / 2 ? 0 : 1, comm.rank());
      if (mesh) {
        check_mesh_on_first_use(half, tagged, channels, "split half");
      } else {
        check_endpoints(half, ring, tagged, channels, "split half", false);
        checked_all_reduce(half, "split half");
      }
    }
    comm.barrier();

    // File descriptors once every communicator of the world is connected
    // (the halves are gone again: their endpoints are closed).
    int64_t fds = open_fds();
    std::vector<int64_t> all(size_t(n), 0);
    comm.all_gather(&fds, all.data(), 1);
    if (g_rank == 0) {
      auto [lo, hi] = std::minmax_element(all.begin() + (n > 1 ? 1 : 0), all.end());
      std::printf(
          "ring_peers: ranks %d channels %d mode %s%s fds rank0 %lld others min %lld max %lld "
          "endpoints data+notice %llu p2p_connected %llu\n",
          n, channels,
          ring       ? "ring"
          : mesh     ? "mesh"
          : declared ? "declared"
                     : "default",
          tagged ? "" : "+untagged", static_cast<long long>(all[0]), static_cast<long long>(*lo),
          static_cast<long long>(*hi), static_cast<unsigned long long>(data_and_notice(comm)),
          static_cast<unsigned long long>(counters(comm)["endpoints.p2p_connected"]));
    }
    int32_t ok = g_failed == 0 ? 1 : 0;
    comm.all_reduce(&ok, &ok, 1, CHORUS_INT32, CHORUS_MIN);
    if (g_rank == 0) std::printf("ring_peers: %s\n", ok ? "every rank passed" : "some rank FAILED");
  } catch (const chorus::Error& e) {
    std::printf("r%d FAIL %s\n", g_rank, e.what());
    return 1;
  }
  return g_failed == 0 ? 0 : 1;
}
