// ABI evolution within major 1: plugins built against an older minor keep
// loading and working, and the core never reads an op that lies beyond a
// table's struct_size (fixture_old_minor.c puts "poison" entries there and
// counts their calls). Plugins of a newer major are refused naming both
// versions: the 'unknown-major' fixtures of fixture_transport.c (exports only
// chorus_transport_plugin_v2) and fixture_algorithm.c (only
// chorus_algorithm_plugin_v3) cover that.
#include <catch2/catch.hpp>

#include "core/auto_transport.h"
#include "core/communicator.h"
#include "core/config.h"
#include "core/plugin_loader.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using chorus::core::load_plugin;
using chorus::core::PluginKind;

namespace {

const std::string kDir = CHORUS_EVOLUTION_FIXTURE_DIR;
constexpr size_t kTransportV10Size = offsetof(chorus_transport_plugin_v1_t, describe);
constexpr size_t kShortAlgorithmSize = offsetof(chorus_algorithm_plugin_v1_t, fini);

/// The fixture's count of calls to ops beyond struct_size. Holding our own
/// dlopen handle also keeps the file mapped after the core has let go of it.
class PoisonCounter {
 public:
  explicit PoisonCounter(const std::string& file) {
    handle_ = ::dlopen((kDir + "/" + file).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_) counter_ = static_cast<int*>(::dlsym(handle_, "chorus_fixture_poison_calls"));
    base_ = value();
  }
  ~PoisonCounter() {
    if (handle_) ::dlclose(handle_);
  }
  PoisonCounter(const PoisonCounter&) = delete;
  PoisonCounter& operator=(const PoisonCounter&) = delete;
  bool ok() const { return counter_ != nullptr; }
  int value() const { return counter_ ? *counter_ : -1; }
  /// Calls since this counter was made.
  int calls() const { return value() - base_; }

 private:
  void* handle_ = nullptr;
  int* counter_ = nullptr;
  int base_ = 0;
};

const char* kOldTransport = "libchorus-transport-old-minor.so";
const char* kOldAlgorithm = "libchorus-algorithm-old-minor.so";
/// fd-loopback: a transport built against minor 4 (no post_send_imm), in its own folder.
const char* kMinor4Transport = "../fixtures_waitfd/libchorus-transport-fd-loopback.so";

/// Polls `ctx` until `want` entries (successes + failures) have been seen.
bool pump(const chorus_transport_plugin_v1_t* tp, chorus_tp_context_t* ctx, size_t want,
          std::vector<chorus_tp_completion_t>& ok, std::vector<chorus_tp_error_t>& failed) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (ok.size() + failed.size() < want && std::chrono::steady_clock::now() < deadline) {
    chorus_tp_completion_t c[8];
    int n = tp->poll(ctx, c, 8);
    if (n > 0) {
      ok.insert(ok.end(), c, c + n);
    } else if (n == CHORUS_ERR_PENDING) {
      chorus_tp_error_t e{};
      if (tp->read_error(ctx, &e) != CHORUS_OK) return false;
      failed.push_back(e);
    } else if (n == 0) {
      tp->wait(ctx, 100);
    } else {
      return false;
    }
  }
  return ok.size() + failed.size() >= want;
}

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

/// A Config from API settings only (the test's own environment is ignored).
chorus::core::Result<chorus::core::Config> config(std::vector<std::string> settings) {
  chorus::core::ConfigInputs in;
  settings.push_back("plugin_path=[\"" + kDir +
                     "\", \"" CHORUS_WAITFD_FIXTURE_DIR "\", \"" CHORUS_BUILD_PLUGIN_DIR "\"]");
  settings.push_back("timeout.init=30");
  settings.push_back("timeout.collective=30");
  in.api_settings = std::move(settings);
  return chorus::core::load_config(in);
}

}  // namespace

TEST_CASE("a transport built against minor 0 loads as ABI 1.0 without describe",
          "[plugin_abi][evolution]") {
  PoisonCounter poison(kOldTransport);
  REQUIRE(poison.ok());
  auto t = load_plugin(PluginKind::kTransport, "old-minor", {kDir});
  REQUIRE(t.is_ok());
  CHECK((*t)->name() == "old-minor");
  CHECK((*t)->abi_version() == "1.0");
  const chorus_transport_plugin_v1_t* tp = (*t)->transport();
  CHECK(tp->minor == 0);
  CHECK(tp->struct_size == kTransportV10Size);
  // The rule every caller applies before an optional op: describe is absent.
  CHECK_FALSE(tp->struct_size >= offsetof(chorus_transport_plugin_v1_t, describe) + sizeof(void*));
  CHECK(poison.calls() == 0);
}

TEST_CASE("list_plugins gives a minor-0 transport an empty inventory", "[plugin_abi][evolution]") {
  PoisonCounter poison(kOldTransport);
  REQUIRE(poison.ok());
  auto found = chorus::core::list_plugins({kDir});
  int transports = 0, algorithms = 0;
  for (const auto& item : found) {
    INFO(item.path << ": " << item.error);
    CHECK(item.name == "old-minor");
    CHECK(item.loaded);
    CHECK(item.abi_version == "1.0");
    CHECK(item.inventory.empty());
    (item.kind == PluginKind::kTransport ? transports : algorithms)++;
  }
  CHECK(transports == 1);
  CHECK(algorithms == 1);
  CHECK(poison.calls() == 0);
}

TEST_CASE("a minor-0 transport carries data for a caller built against minor 1",
          "[plugin_abi][evolution]") {
  auto t = load_plugin(PluginKind::kTransport, "old-minor", {kDir});
  REQUIRE(t.is_ok());
  const chorus_transport_plugin_v1_t* tp = (*t)->transport();
  chorus_tp_context_t* ctx[2] = {nullptr, nullptr};
  chorus_tp_endpoint_t* ep[2] = {nullptr, nullptr};
  std::vector<unsigned char> blob[2];
  for (int r = 0; r < 2; ++r) {
    chorus_tp_context_info_t info{};
    info.struct_size = sizeof info;
    info.rank = r;
    info.size = 2;
    info.bind_address = "127.0.0.1";
    REQUIRE(tp->context_open(&info, &ctx[r]) == CHORUS_OK);
    chorus_tp_caps_t caps{};
    caps.struct_size = sizeof caps;
    REQUIRE(tp->get_caps(ctx[r], &caps) == CHORUS_OK);
    blob[r].resize(caps.max_address_size);
    size_t len = blob[r].size();
    REQUIRE(tp->endpoint_open(ctx[r], 1 - r, 0, blob[r].data(), &len, &ep[r]) == CHORUS_OK);
    blob[r].resize(len);
  }
  for (int r = 0; r < 2; ++r)
    REQUIRE(tp->endpoint_connect(ep[r], blob[1 - r].data(), blob[1 - r].size(), 1000) == CHORUS_OK);

  char hello[] = "hello from rank 0", reply[] = "and back from rank 1";
  char in0[64] = {}, in1[64] = {}, tiny[4] = {};
  REQUIRE(tp->post_recv(ep[1], in1, sizeof in1, nullptr, 11) == CHORUS_OK);
  REQUIRE(tp->post_send(ep[0], hello, sizeof hello, nullptr, 1) == CHORUS_OK);
  REQUIRE(tp->post_send(ep[1], reply, sizeof reply, nullptr, 2) == CHORUS_OK);  // send first
  REQUIRE(tp->post_recv(ep[0], in0, sizeof in0, nullptr, 10) == CHORUS_OK);
  std::vector<chorus_tp_completion_t> ok[2];
  std::vector<chorus_tp_error_t> failed[2];
  REQUIRE(pump(tp, ctx[0], 2, ok[0], failed[0]));
  REQUIRE(pump(tp, ctx[1], 2, ok[1], failed[1]));
  CHECK(failed[0].empty());
  CHECK(failed[1].empty());
  CHECK(std::string(in1) == hello);
  CHECK(std::string(in0) == reply);
  for (const auto& c : ok[1])
    if (c.opcode == CHORUS_TP_RECV) CHECK(c.byte_len == sizeof hello);

  // A short receive fails with the sizes named, read through read_error.
  REQUIRE(tp->post_recv(ep[1], tiny, sizeof tiny, nullptr, 12) == CHORUS_OK);
  REQUIRE(tp->post_send(ep[0], hello, sizeof hello, nullptr, 3) == CHORUS_OK);
  ok[1].clear();
  REQUIRE(pump(tp, ctx[1], 1, ok[1], failed[1]));
  REQUIRE(failed[1].size() == 1);
  CHECK(failed[1][0].wr_id == 12);
  CHECK(failed[1][0].endpoint == ep[1]);
  CHECK_THAT(failed[1][0].message, Catch::Contains("18 bytes"));

  // interrupt (1.0's last op) wakes a wait.
  REQUIRE(tp->struct_size >= offsetof(chorus_transport_plugin_v1_t, interrupt) + sizeof(void*));
  REQUIRE(tp->interrupt(ctx[1]) == CHORUS_OK);
  CHECK(tp->wait(ctx[1], 5000) == CHORUS_OK);

  CHECK(tp->context_close(ctx[0]) == CHORUS_OK);
  CHECK(tp->context_close(ctx[1]) == CHORUS_OK);
}

TEST_CASE("a communicator of two thread ranks runs collectives over a minor-0 transport",
          "[plugin_abi][evolution]") {
  PoisonCounter poison(kOldTransport);
  REQUIRE(poison.ok());
  const std::string coordinator = "127.0.0.1:" + std::to_string(free_port());
  std::string errors[2];
  auto rank = [&](int r) {
    auto cfg = config({"transport.name=\"old-minor\"", "bootstrap.rank=" + std::to_string(r),
                       "bootstrap.world_size=2", "bootstrap.coordinator=\"" + coordinator + "\""});
    if (!cfg.is_ok()) {
      errors[r] = cfg.status().message();
      return;
    }
    auto comm = chorus::core::Communicator::create(std::move(*cfg));
    if (!comm.is_ok()) {
      errors[r] = comm.status().message();
      return;
    }
    std::vector<float> x(100003);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 1000) + float(r);
    if (auto st = (*comm)->all_reduce(x.data(), x.data(), x.size(), CHORUS_FLOAT32, CHORUS_SUM);
        !st.is_ok()) {
      errors[r] = st.message();
      return;
    }
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] != 2.0f * float(i % 1000) + 1.0f) {
        errors[r] = "all_reduce: wrong value at " + std::to_string(i);
        return;
      }
    int32_t mine[3] = {r, r * 10, r * 100}, all[6] = {};
    if (auto st = (*comm)->all_gather(mine, all, 3, CHORUS_INT32); !st.is_ok()) {
      errors[r] = st.message();
      return;
    }
    if (all[0] != 0 || all[3] != 1 || all[4] != 10 || all[5] != 100)
      errors[r] = "all_gather: wrong values";
    else if (auto st = (*comm)->barrier(); !st.is_ok())
      errors[r] = st.message();
  };
  std::thread other(rank, 1);
  rank(0);
  other.join();
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  CHECK(poison.calls() == 0);
}

/// Three thread ranks of auto over `local` (the local sub-transport) and tcp.
/// Ranks 0 and 1 share a "host" and talk over `local`; rank 2 is on another,
/// reached over tcp. So ranks 0 and 1 have peers on both sub-transports and
/// sleep on both in wait(). Returns each rank's error text ("" when fine).
std::vector<std::string> run_auto_three_ranks(const std::string& local) {
  const std::string coordinator = "127.0.0.1:" + std::to_string(free_port());
  std::vector<std::string> errors(3);
  auto rank = [&](int r) {
    auto cfg = config({"transport.name=\"auto\"", "transport.auto.local=\"" + local + "\"",
                       "transport.auto.fabric=\"tcp\"",
                       std::string("transport.auto.host_id=\"") + (r < 2 ? "A" : "B") + "\"",
                       "bootstrap.rank=" + std::to_string(r), "bootstrap.world_size=3",
                       "bootstrap.coordinator=\"" + coordinator + "\""});
    if (!cfg.is_ok()) {
      errors[r] = cfg.status().message();
      return;
    }
    auto comm = chorus::core::Communicator::create(std::move(*cfg));
    if (!comm.is_ok()) {
      errors[r] = comm.status().message();
      return;
    }
    std::vector<float> x(4096, float(r + 1));
    for (int round = 0; round < 5; ++round) {
      // The late rank makes the others sleep in wait().
      if (r == round % 3) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (auto st = (*comm)->barrier(); !st.is_ok()) {
        errors[r] = st.message();
        return;
      }
    }
    if (auto st = (*comm)->all_reduce(x.data(), x.data(), x.size(), CHORUS_FLOAT32, CHORUS_SUM);
        !st.is_ok()) {
      errors[r] = st.message();
      return;
    }
    for (float v : x)
      if (v != 6.0f) {
        errors[r] = "all_reduce: wrong value";
        return;
      }
  };
  std::thread others[2] = {std::thread(rank, 1), std::thread(rank, 2)};
  rank(0);
  for (auto& t : others) t.join();
  return errors;
}

TEST_CASE("auto with a sub-transport older than wait_fd runs, waiting through its helper thread",
          "[plugin_abi][evolution]") {
  PoisonCounter poison(kOldTransport);
  REQUIRE(poison.ok());
  const int threads_before = chorus::core::auto_transport_helper_threads();
  const auto errors = run_auto_three_ranks("old-minor");
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  CHECK(errors[2] == "");
  CHECK(poison.calls() == 0);  // its wait_fd slot lies beyond struct_size
  // The fixture has no wait object, so a wait over both sub-contexts took the
  // helper thread: ranks 0 and 1 started one each, rank 2 (tcp peers only)
  // none.
  const int started = chorus::core::auto_transport_helper_threads() - threads_before;
  CHECK(started >= 1);
  CHECK(started <= 2);
}

TEST_CASE("auto over two sub-transports with wait objects starts no helper thread",
          "[plugin_abi][evolution]") {
  PoisonCounter poison(kMinor4Transport);
  REQUIRE(poison.ok());
  const int threads_before = chorus::core::auto_transport_helper_threads();
  const auto errors = run_auto_three_ranks("fd-loopback");
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  CHECK(errors[2] == "");
  CHECK(chorus::core::auto_transport_helper_threads() == threads_before);
  CHECK(poison.calls() == 0);  // its post_send_imm slot lies beyond struct_size
}

TEST_CASE("a transport built against minor 4 loads as ABI 1.4 without post_send_imm",
          "[plugin_abi][evolution]") {
  PoisonCounter poison(kMinor4Transport);
  REQUIRE(poison.ok());
  auto t = load_plugin(PluginKind::kTransport, "fd-loopback", {CHORUS_WAITFD_FIXTURE_DIR});
  REQUIRE(t.is_ok());
  CHECK((*t)->abi_version() == "1.4");
  const chorus_transport_plugin_v1_t* tp = (*t)->transport();
  CHECK(tp->minor == 4);
  CHECK(tp->struct_size == offsetof(chorus_transport_plugin_v1_t, post_send_imm));
  // The rule every caller applies before an optional op: post_send_imm is absent.
  CHECK_FALSE(tp->struct_size >=
              offsetof(chorus_transport_plugin_v1_t, post_send_imm) + sizeof(void*));
  CHECK(poison.calls() == 0);
}

TEST_CASE("an algorithm table that ends after init is accepted; the ops it lacks are absent",
          "[plugin_abi][evolution]") {
  PoisonCounter poison(kOldAlgorithm);
  REQUIRE(poison.ok());
  // Keep the plugin loaded for the whole case, so unloading (see the next
  // case) is not mixed into these checks.
  auto a = load_plugin(PluginKind::kAlgorithm, "old-minor", {kDir});
  REQUIRE(a.is_ok());
  CHECK((*a)->abi_version() == "1.0");
  CHECK((*a)->algorithm()->struct_size == kShortAlgorithmSize);
  CHECK((*a)->algorithm()->struct_size >=
        offsetof(chorus_algorithm_plugin_v1_t, init) + sizeof(void*));

  // Pinning it for a collective it cannot have fails at init, by name.
  auto cfg = config({"transport.name=\"old-minor\"", "algorithm.all_reduce=\"old-minor\""});
  REQUIRE(cfg.is_ok());
  auto comm = chorus::core::Communicator::create(std::move(*cfg));
  REQUIRE_FALSE(comm.is_ok());
  CHECK(comm.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK_THAT(comm.status().message(), Catch::Contains("'old-minor'"));
  CHECK_THAT(comm.status().message(), Catch::Contains("does not implement all_reduce"));
  CHECK(poison.calls() == 0);
}

TEST_CASE("an algorithm built against minor 0 keeps working; the minor-1 collectives go elsewhere",
          "[plugin_abi][evolution]") {
  const std::string dir = CHORUS_MINOR0_FIXTURE_DIR;
  PoisonCounter poison("../fixtures_minor0/libchorus-algorithm-minor-zero.so");
  REQUIRE(poison.ok());
  auto settings = [&](std::vector<std::string> s) {
    chorus::core::ConfigInputs in;
    s.push_back("plugin_path=[\"" + dir + "\", \"" CHORUS_BUILD_PLUGIN_DIR "\"]");
    s.push_back("timeout.init=30");
    s.push_back("timeout.collective=30");
    in.api_settings = std::move(s);
    return chorus::core::load_config(in);
  };
  {
    // Pinned for what it has, auto for the rest: the minor-1 collectives
    // are served by the built-in algorithms, never by the entries that lie
    // beyond the plugin's struct_size.
    auto cfg = settings({"algorithm.all_reduce=\"minor-zero\""});
    REQUIRE(cfg.is_ok());
    auto comm = chorus::core::Communicator::create(std::move(*cfg));
    REQUIRE(comm.is_ok());
    using chorus::core::Communicator;
    const auto* pinned =
        (*comm)->choose_plugin(Communicator::query_call(CHORUS_COLL_ALL_REDUCE, 8));
    REQUIRE(pinned != nullptr);
    CHECK(pinned->name() == "minor-zero");
    for (int c : {CHORUS_COLL_REDUCE, CHORUS_COLL_GATHER, CHORUS_COLL_SCATTER,
                  CHORUS_COLL_ALL_TO_ALL, CHORUS_COLL_ALL_TO_ALLV}) {
      const auto* a = (*comm)->choose_plugin(Communicator::query_call(c, 8));
      REQUIRE(a != nullptr);
      CHECK(a->name() != "minor-zero");
    }
    float x[3] = {1, 2, 3}, y[3] = {0, 0, 0};
    CHECK((*comm)->all_reduce(x, y, 3, CHORUS_FLOAT32, CHORUS_SUM).is_ok());
    CHECK(y[2] == 3.0f);
    CHECK((*comm)->reduce(x, y, 3, CHORUS_FLOAT32, CHORUS_SUM, 0).is_ok());
    CHECK((*comm)->gather(x, y, 3, CHORUS_FLOAT32, 0).is_ok());
    CHECK((*comm)->scatter(x, y, 3, CHORUS_FLOAT32, 0).is_ok());
    CHECK((*comm)->all_to_all(x, y, 3, CHORUS_FLOAT32).is_ok());
    size_t n = 3, off = 0;
    CHECK((*comm)->all_to_allv(x, &n, &off, y, &n, &off, CHORUS_FLOAT32).is_ok());
    CHECK(y[0] == 1.0f);
  }
  // Pinning it for a minor-1 collective fails at init, naming the collective.
  auto cfg = settings({"algorithm.gather=\"minor-zero\""});
  REQUIRE(cfg.is_ok());
  auto comm = chorus::core::Communicator::create(std::move(*cfg));
  REQUIRE_FALSE(comm.is_ok());
  CHECK(comm.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK_THAT(comm.status().message(), Catch::Contains("does not implement gather"));
  CHECK(poison.calls() == 0);
}

// Plugin::~Plugin calls the algorithm's fini; for a table as short as this
// one, fini lies beyond struct_size and must not be read.
TEST_CASE("unloading a short algorithm table reads no fini beyond struct_size",
          "[plugin_abi][evolution]") {
  PoisonCounter poison(kOldAlgorithm);
  REQUIRE(poison.ok());
  {
    auto a = load_plugin(PluginKind::kAlgorithm, "old-minor", {kDir});
    REQUIRE(a.is_ok());
  }
  INFO("Plugin::~Plugin (core/plugin_loader.cc) called a fini beyond struct_size");
  CHECK(poison.calls() == 0);
}

TEST_CASE("plugins of a newer major are refused naming both versions", "[plugin_abi][evolution]") {
  auto t = load_plugin(PluginKind::kTransport, "unknown-major", {CHORUS_FIXTURE_DIR});
  REQUIRE_FALSE(t.is_ok());
  CHECK_THAT(t.status().message(), Catch::Contains("built for transport ABI v2"));
  CHECK_THAT(t.status().message(), Catch::Contains("chorus_transport_plugin_v2"));
  CHECK_THAT(t.status().message(), Catch::Contains("supports v1 only"));
  auto a = load_plugin(PluginKind::kAlgorithm, "unknown-major", {CHORUS_FIXTURE_DIR});
  REQUIRE_FALSE(a.is_ok());
  CHECK_THAT(a.status().message(), Catch::Contains("built for algorithm ABI v3"));
  CHECK_THAT(a.status().message(), Catch::Contains("supports v1 and v2"));
}
