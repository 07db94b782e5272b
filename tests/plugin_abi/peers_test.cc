// The `peers` declaration of algorithm ABI v2 (minor 1): the loader reads it
// (0 and a minor-0 table mean ALL, any other value refuses the plugin), and a
// communicator whose algorithms all declare RING opens data endpoints to its
// two neighbours only, so that a plugin that declares RING and posts to
// another rank fails on every rank with the reason, not a crash or a hang.
#include <catch2/catch.hpp>

#include <chorus/algorithm_sdk.hpp>

#include "core/communicator.h"
#include "core/config.h"
#include "core/data_peers.h"
#include "core/plugin_loader.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

using chorus::core::DataPeers;
using chorus::core::load_plugin;
using chorus::core::PluginKind;

namespace {

uint16_t free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

const char* const kCollectives[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                    "barrier",    "reduce",     "gather",         "scatter",
                                    "all_to_all", "all_to_allv"};

/// Rank r of `size` over tcp, every collective pinned to ring except
/// all_reduce, pinned to `all_reduce_algo`; the fixture folder on the path.
chorus::core::Result<chorus::core::Config> ring_config(
    int r, int size, const std::string& coord, const std::string& all_reduce_algo,
    const std::string& all_gather_algo = "ring") {
  chorus::core::ConfigInputs in;
  std::vector<std::string> s = {"transport.name=\"tcp\"",
                                "bootstrap.rank=" + std::to_string(r),
                                "bootstrap.world_size=" + std::to_string(size),
                                "bootstrap.coordinator=\"" + coord + "\"",
                                "plugin_path=[\"" CHORUS_FIXTURE_DIR
                                "\", \"" CHORUS_BUILD_PLUGIN_DIR "\"]",
                                "timeout.init=60",
                                "timeout.collective=30"};
  for (const char* c : kCollectives)
    s.push_back(std::string("algorithm.") + c + "=\"" +
                (std::string(c) == "all_reduce"   ? all_reduce_algo
                 : std::string(c) == "all_gather" ? all_gather_algo
                                                  : "ring") +
                "\"");
  in.api_settings = std::move(s);
  return chorus::core::load_config(in);
}

uint64_t counter(const chorus::core::Communicator& c, const std::string& name) {
  for (const auto& [n, v] : c.counters())
    if (n == name) return v;
  return UINT64_MAX;
}

// CHORUS_ALGORITHM_EXPORT_V2 fills `peers` from an optional Algo::kPeers.
struct DeclaresRing {
  static constexpr uint32_t kPeers = CHORUS_ALGO_PEERS_RING;
};
struct DeclaresNothing {};
static_assert(chorus::sdk::declared_peers<DeclaresRing>() == CHORUS_ALGO_PEERS_RING);
static_assert(chorus::sdk::declared_peers<DeclaresNothing>() == CHORUS_ALGO_PEERS_ALL);

}  // namespace

TEST_CASE("DataPeers: RING links rank-1 and rank+1, ALL every pair, symmetrically",
          "[plugin_abi][peers]") {
  for (int size = 1; size <= 9; ++size) {
    const DataPeers ring(CHORUS_ALGO_PEERS_RING, size), all(CHORUS_ALGO_PEERS_ALL, size);
    for (int a = 0; a < size; ++a) {
      const auto mine = ring.of(a);
      // Independent count: rank±1 mod size, minus self, once each.
      const size_t want = size == 1 ? 0 : size == 2 ? 1 : 2;
      CHECK(mine.size() == want);
      CHECK(all.of(a).size() == size_t(size - 1));
      for (int b = 0; b < size; ++b) {
        const bool neighbour = a != b && ((a + 1) % size == b || (b + 1) % size == a);
        CHECK(ring.links(a, b) == neighbour);
        CHECK(ring.links(a, b) == ring.links(b, a));
        CHECK(all.links(a, b) == (a != b));
        CHECK((std::find(mine.begin(), mine.end(), b) != mine.end()) == neighbour);
      }
    }
  }
  CHECK(DataPeers(CHORUS_ALGO_PEERS_RING, 8).describe(0) == "ranks 1 and 7");
  CHECK(DataPeers(CHORUS_ALGO_PEERS_RING, 2).describe(1) == "rank 0");
  CHECK(DataPeers(CHORUS_ALGO_PEERS_ALL, 8).describe(3) == "every other rank");
  CHECK_FALSE(DataPeers(CHORUS_ALGO_PEERS_RING, 4).links(0, 4));
}

TEST_CASE("the v2 peers field: 0 and a minor-0 table mean ALL, a bad value is refused",
          "[plugin_abi][peers]") {
  auto ok = load_plugin(PluginKind::kAlgorithm, "v2-ok", {CHORUS_FIXTURE_DIR});
  REQUIRE(ok.is_ok());
  CHECK((*ok)->algorithm_peers() == CHORUS_ALGO_PEERS_ALL);

  // Its table has RING beyond struct_size: never read.
  auto old = load_plugin(PluginKind::kAlgorithm, "v2-minor0", {CHORUS_FIXTURE_DIR});
  REQUIRE(old.is_ok());
  CHECK((*old)->abi_version() == "2.0");
  CHECK((*old)->algorithm_peers() == CHORUS_ALGO_PEERS_ALL);

  auto ring = load_plugin(PluginKind::kAlgorithm, "v2-ring-stray", {CHORUS_FIXTURE_DIR});
  REQUIRE(ring.is_ok());
  CHECK((*ring)->algorithm_peers() == CHORUS_ALGO_PEERS_RING);

  auto bad = load_plugin(PluginKind::kAlgorithm, "v2-bad-peers", {CHORUS_FIXTURE_DIR});
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().code() == CHORUS_ERR_UNAVAILABLE);
  CHECK_THAT(bad.status().message(), Catch::Contains("peers is 7"));
  CHECK_THAT(bad.status().message(), Catch::Contains("CHORUS_ALGO_PEERS_RING (1)"));
  CHECK_THAT(bad.status().message(), Catch::Contains("kPeers"));

  // The built-in v1 ring declares RING, the mesh ALL.
  auto builtin_ring = load_plugin(PluginKind::kAlgorithm, "ring", {CHORUS_BUILD_PLUGIN_DIR});
  REQUIRE(builtin_ring.is_ok());
  CHECK((*builtin_ring)->algorithm_peers() == CHORUS_ALGO_PEERS_RING);
  auto builtin_mesh = load_plugin(PluginKind::kAlgorithm, "mesh", {CHORUS_BUILD_PLUGIN_DIR});
  REQUIRE(builtin_mesh.is_ok());
  CHECK((*builtin_mesh)->algorithm_peers() == CHORUS_ALGO_PEERS_ALL);
}

namespace {

constexpr int kSize = 4;

/// What each of kSize thread ranks saw: a ring all_reduce on a ring-only
/// communicator, then a communicator whose all_reduce is `stray_algo`.
struct StrayJob {
  std::string errors[kSize];
  int codes[kSize] = {}, later_codes[kSize] = {};
  std::string messages[kSize], later[kSize];
  uint64_t data_eps[kSize] = {}, ring_sum_ok[kSize] = {};
  double seconds[kSize] = {};
};

void run_stray_job(const std::string& stray_algo, StrayJob& job) {
  const std::string coord = "127.0.0.1:" + std::to_string(free_port());
  const std::string coord2 = "127.0.0.1:" + std::to_string(free_port());
  auto rank = [&](int r) {
    // First a communicator whose all_reduce is the real ring: it runs,
    // checked, on the two data endpoints.
    {
      auto cfg = ring_config(r, kSize, coord, "ring");
      if (!cfg.is_ok()) {
        job.errors[r] = cfg.status().message();
        return;
      }
      auto comm = chorus::core::Communicator::create(std::move(*cfg));
      if (!comm.is_ok()) {
        job.errors[r] = comm.status().message();
        return;
      }
      std::vector<int64_t> x(1001);
      for (size_t i = 0; i < x.size(); ++i) x[i] = int64_t(i) * 10 + r;
      auto st = (*comm)->all_reduce(x.data(), x.data(), x.size(), CHORUS_INT64, CHORUS_SUM);
      bool right = st.is_ok();
      // Sum over 4 ranks of (10 i + r) = 40 i + 6.
      for (size_t i = 0; right && i < x.size(); ++i) right = x[i] == int64_t(i) * 40 + 6;
      job.ring_sum_ok[r] = right ? 1 : 0;
      if (!st.is_ok()) job.errors[r] = st.message();
    }
    auto cfg = ring_config(r, kSize, coord2, stray_algo);
    if (!cfg.is_ok()) {
      job.errors[r] = cfg.status().message();
      return;
    }
    auto comm = chorus::core::Communicator::create(std::move(*cfg));
    if (!comm.is_ok()) {
      job.errors[r] = comm.status().message();
      return;
    }
    job.data_eps[r] = counter(**comm, "endpoints.data");
    int64_t v = r;
    const auto t0 = std::chrono::steady_clock::now();
    auto st = (*comm)->all_reduce(&v, &v, 1, CHORUS_INT64, CHORUS_SUM);
    job.seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    job.codes[r] = st.code();
    job.messages[r] = st.message();
    auto again = (*comm)->barrier();
    job.later_codes[r] = again.code();
    job.later[r] = again.message();
  };
  std::vector<std::thread> others;
  for (int r = 1; r < kSize; ++r) others.emplace_back(rank, r);
  rank(0);
  for (auto& t : others) t.join();
}

/// The checks both stray fixtures share, on every rank.
void check_stray_job(const StrayJob& job, const std::string& algo, int code) {
  for (int r = 0; r < kSize; ++r) {
    INFO("rank " << r);
    CHECK(job.errors[r] == "");
    CHECK(job.ring_sum_ok[r] == 1);
    CHECK(job.data_eps[r] == 2);
    CHECK(job.codes[r] == code);
    const std::string stray = std::to_string((r + 2) % kSize);
    const std::string& m = job.messages[r];
    CHECK_THAT(m, Catch::Contains("algorithm '" + algo + "' posted to rank " + stray));
    CHECK_THAT(m, Catch::Contains("no data endpoint to rank " + stray));
    CHECK_THAT(m, Catch::Contains("declares CHORUS_ALGO_PEERS_RING"));
    const int lo = std::min((r + 1) % kSize, (r + 3) % kSize);
    const int hi = std::max((r + 1) % kSize, (r + 3) % kSize);
    CHECK_THAT(m, Catch::Contains("connects only ranks " + std::to_string(lo) + " and " +
                                  std::to_string(hi)));
    CHECK_THAT(m, Catch::Contains("Declare CHORUS_ALGO_PEERS_ALL in '" + algo + "'"));
    // Refused at the post: far inside timeout.collective (30 s).
    CHECK(job.seconds[r] < 10.0);
    // The communicator is broken, and says so, rather than half-usable.
    CHECK(job.later_codes[r] == code);
    CHECK_THAT(job.later[r], Catch::Contains("failed earlier and cannot be used"));
  }
}

}  // namespace

TEST_CASE("a RING plugin that posts to a non-neighbour fails on every rank, naming why",
          "[plugin_abi][peers]") {
  StrayJob job;
  run_stray_job("v2-ring-stray", job);
  check_stray_job(job, "v2-ring-stray", CHORUS_ERR_NOT_SUPPORTED);
}

TEST_CASE("a RING plugin that reports the NULL endpoint itself gets the reason in front",
          "[plugin_abi][peers]") {
  StrayJob job;
  run_stray_job("v2-ring-stray-checked", job);
  check_stray_job(job, "v2-ring-stray-checked", CHORUS_ERR_INTERNAL);
  for (int r = 0; r < kSize; ++r)
    CHECK_THAT(job.messages[r],
               Catch::Contains("(the algorithm reported: fixture: no endpoint to rank+2)"));
}

TEST_CASE(
    "a RING plugin that posts to a non-neighbour of a mesh communicator gets NULL "
    "before the first mesh call, naming why",
    "[plugin_abi][peers]") {
  // all_gather pinned to the mesh: every peer has a data endpoint, opened
  // and addressed at init, but only the ring neighbours' are connected
  // (core/data_connect.cc). The stray plugin must not get the others.
  const std::string coord = "127.0.0.1:" + std::to_string(free_port());
  std::string errors[kSize], messages[kSize];
  int codes[kSize] = {};
  uint64_t opened[kSize] = {}, connected[kSize] = {};
  auto rank = [&](int r) {
    auto cfg = ring_config(r, kSize, coord, "v2-ring-stray", "mesh");
    if (!cfg.is_ok()) {
      errors[r] = cfg.status().message();
      return;
    }
    auto comm = chorus::core::Communicator::create(std::move(*cfg));
    if (!comm.is_ok()) {
      errors[r] = comm.status().message();
      return;
    }
    opened[r] = counter(**comm, "endpoints.data");
    connected[r] = counter(**comm, "endpoints.data_connected");
    int64_t v = r;
    auto st = (*comm)->all_reduce(&v, &v, 1, CHORUS_INT64, CHORUS_SUM);
    codes[r] = st.code();
    messages[r] = st.message();
  };
  std::vector<std::thread> others;
  for (int r = 1; r < kSize; ++r) others.emplace_back(rank, r);
  rank(0);
  for (auto& t : others) t.join();
  for (int r = 0; r < kSize; ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == "");
    CHECK(opened[r] == kSize - 1);
    CHECK(connected[r] == 2);
    CHECK(codes[r] == CHORUS_ERR_NOT_SUPPORTED);
    const std::string stray = std::to_string((r + 2) % kSize);
    CHECK_THAT(messages[r],
               Catch::Contains("algorithm 'v2-ring-stray' posted to rank " + stray +
                               ", which is not a ring neighbour of rank " + std::to_string(r)));
    CHECK_THAT(messages[r], Catch::Contains("declares CHORUS_ALGO_PEERS_RING"));
    CHECK_THAT(messages[r], Catch::Contains("Declare CHORUS_ALGO_PEERS_ALL in 'v2-ring-stray'"));
  }
}
