#include <catch2/catch.hpp>

#include "core/auto_transport.h"
#include "core/config.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

using namespace chorus::core;

namespace {

std::vector<std::byte> bytes(const std::string& s) {
  std::vector<std::byte> b;
  for (char c : s) b.push_back(std::byte(c));
  return b;
}

AutoBlob sample_blob() {
  AutoBlob b;
  b.host_id = "boot=x host=h netns=1 pidns=2 shm=3";
  b.local_name = "shm";
  b.fabric_name = "tcp";
  b.local = bytes("local-address");
  b.fabric = bytes(std::string("fabric\0address", 14));
  return b;
}

Result<Config> config_from(std::vector<std::string> api,
                           std::map<std::string, std::string> env = {}) {
  ConfigInputs in;
  in.api_settings = std::move(api);
  in.env = std::move(env);
  return load_config(in);
}

}  // namespace

TEST_CASE("auto blobs round-trip and refuse anything malformed", "[auto]") {
  AutoBlob b = sample_blob();
  auto enc = auto_blob_encode(b);
  REQUIRE(enc.is_ok());
  CHECK(enc->size() <= auto_blob_overhead() + b.local.size() + b.fabric.size());
  auto dec = auto_blob_decode(*enc);
  REQUIRE(dec.is_ok());
  CHECK(dec->host_id == b.host_id);
  CHECK(dec->local_name == "shm");
  CHECK(dec->fabric_name == "tcp");
  CHECK(dec->local == b.local);
  CHECK(dec->fabric == b.fabric);

  // Every proper prefix is truncated, one more byte is trailing garbage.
  for (size_t n = 0; n < enc->size(); ++n)
    CHECK_FALSE(auto_blob_decode(std::span<const std::byte>(enc->data(), n)).is_ok());
  auto longer = *enc;
  longer.push_back(std::byte(0));
  CHECK_FALSE(auto_blob_decode(longer).is_ok());
  auto bad_magic = *enc;
  bad_magic[0] = std::byte('X');
  CHECK_FALSE(auto_blob_decode(bad_magic).is_ok());
  auto bad_version = *enc;
  bad_version[4] = std::byte(99);
  CHECK_FALSE(auto_blob_decode(bad_version).is_ok());
  // A sub-blob length that points past the end.
  auto huge = *enc;
  size_t local_len_at = 4 + 1 + 1 + b.host_id.size() + 1 + 3 + 1 + 3;
  huge[local_len_at + 3] = std::byte(0x7f);
  CHECK_FALSE(auto_blob_decode(huge).is_ok());

  AutoBlob too_long = b;
  too_long.host_id.assign(kAutoMaxHostId + 1, 'h');
  CHECK_FALSE(auto_blob_encode(too_long).is_ok());
}

TEST_CASE("the per-peer choice is the same on both sides", "[auto]") {
  const std::string a = "boot=1 host=a netns=10 pidns=2 shm=3";
  const std::string b = "boot=1 host=a netns=11 pidns=2 shm=3";  // another network namespace
  CHECK(auto_use_local(a, a));
  CHECK_FALSE(auto_use_local(a, b));
  CHECK(auto_use_local(a, b) == auto_use_local(b, a));
}

TEST_CASE("the host identity names boot id, host name and namespaces", "[auto]") {
  std::string id = auto_host_identity();
  std::string boot;
  std::getline(std::ifstream("/proc/sys/kernel/random/boot_id"), boot);
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  char ns[128] = {0};
  REQUIRE(::readlink("/proc/self/ns/net", ns, sizeof ns - 1) > 0);
  std::string net(ns);
  net = net.substr(net.find('[') + 1, net.find(']') - net.find('[') - 1);
  CHECK(id.find("boot=" + boot) != std::string::npos);
  CHECK(id.find(std::string(" host=") + host + " ") != std::string::npos);
  CHECK(id.find(" netns=" + net + " ") != std::string::npos);
  CHECK(id.find(" pidns=") != std::string::npos);
  CHECK(id.size() <= kAutoMaxHostId);
  CHECK(auto_host_identity() == id);  // stable
}

TEST_CASE("rank lists collapse runs of three or more", "[auto]") {
  CHECK(auto_rank_list({}) == "");
  CHECK(auto_rank_list({1}) == "1");
  CHECK(auto_rank_list({1, 2}) == "1,2");
  CHECK(auto_rank_list({1, 2, 3}) == "1..3");
  CHECK(auto_rank_list({0, 2, 3, 4, 5, 7, 9, 10}) == "0,2..5,7,9,10");
  CHECK(auto_transport_summary({{"shm", {1, 2, 3}}, {"tcp", {4, 5, 6, 7}}}) ==
        "shm to ranks 1..3; tcp to ranks 4..7");
  CHECK(auto_transport_summary({{"shm", {}}, {"tcp", {4}}}) == "tcp to rank 4");
  CHECK(auto_transport_summary({{"shm", {}}, {"tcp", {}}}) == "no peers");
}

TEST_CASE("transport.auto keys are validated", "[auto][config]") {
  auto ok = config_from({"transport.name=\"auto\"", "transport.auto.fabric=\"verbs\"",
                         "transport.tcp.sockets=4", "transport.shm.spin_us=0"});
  REQUIRE(ok.is_ok());
  CHECK(ok->transport == "auto");
  CHECK(auto_transport_names(*ok) == std::pair<std::string, std::string>{"shm", "verbs"});

  auto env = config_from({}, {{"CHORUS_TRANSPORT", "auto"},
                              {"CHORUS_TRANSPORT_AUTO_FABRIC", "ofi"},
                              {"CHORUS_TRANSPORT_AUTO_HOST_ID", "rack1-node7"}});
  REQUIRE(env.is_ok());
  CHECK(auto_transport_names(*env).second == "ofi");

  auto unknown = config_from({"transport.auto.fabirc=\"tcp\""});
  REQUIRE_FALSE(unknown.is_ok());
  CHECK(unknown.status().message().find("transport.auto.fabirc") != std::string::npos);
  CHECK(unknown.status().message().find("local, fabric and host_id") != std::string::npos);

  auto recursive = config_from({"transport.auto.local=\"auto\""});
  REQUIRE_FALSE(recursive.is_ok());
  CHECK(recursive.status().message().find("not a transport name") != std::string::npos);

  auto wrong_type = config_from({"transport.auto.fabric=3"});
  REQUIRE_FALSE(wrong_type.is_ok());
  CHECK(wrong_type.status().message().find("expected a string") != std::string::npos);

  auto same = config_from({"transport.auto.local=\"tcp\""});
  REQUIRE_FALSE(same.is_ok());
  CHECK(same.status().message().find("both 'tcp'") != std::string::npos);

  auto spaces = config_from({"transport.auto.host_id=\"a b\""});
  REQUIRE_FALSE(spaces.is_ok());
}

TEST_CASE("the composite gets its own and its sub-transports' settings", "[auto][config]") {
  auto cfg =
      config_from({"transport.name=\"auto\"", "transport.tcp.sockets=4", "transport.shm.spin_us=0",
                   "transport.verbs.device=\"mlx5_0\"", "transport.auto.host_id=\"n1\""});
  REQUIRE(cfg.is_ok());
  std::map<std::string, std::string> got;
  for (const auto& s : auto_transport_settings(*cfg)) got[s.key] = s.value;
  CHECK(got["tcp.sockets"] == "4");
  CHECK(got["shm.spin_us"] == "0");
  CHECK(got["host_id"] == "n1");
  CHECK(got.count("verbs.device") == 0);  // not a sub-transport in use
}

namespace {

/// A composite context opened through the ABI table with `kv`.
struct Ctx {
  Ctx(int rank, std::vector<chorus_kv_t> kv, int size = 2) {
    chorus_tp_context_info_t info{};
    info.struct_size = sizeof info;
    info.rank = rank;
    info.size = size;
    info.bind_address = "127.0.0.1";
    info.config = kv.data();
    info.config_count = kv.size();
    rc = tp->context_open(&info, &ctx);
  }
  ~Ctx() {
    if (ctx) tp->context_close(ctx);
  }
  const chorus_transport_plugin_v1_t* tp = auto_transport_plugin()->transport();
  chorus_tp_context_t* ctx = nullptr;
  int rc = -1;
};

/// Connects rank 0 and 1 of two composite contexts, sends one message each
/// way and returns which sub-transport each side reports for its peer.
std::pair<std::string, std::string> exchange(const char* id0, const char* id1) {
  std::vector<chorus_kv_t> kv0 = {{"host_id", id0, "test"}}, kv1 = {{"host_id", id1, "test"}};
  Ctx a(0, kv0), b(1, kv1);
  REQUIRE(a.rc == CHORUS_OK);
  REQUIRE(b.rc == CHORUS_OK);
  const auto* tp = a.tp;
  chorus_tp_caps_t caps{};
  caps.struct_size = sizeof caps;
  REQUIRE(tp->get_caps(a.ctx, &caps) == CHORUS_OK);
  std::vector<unsigned char> ba(caps.max_address_size), bb(caps.max_address_size);
  size_t la = ba.size(), lb = bb.size();
  chorus_tp_endpoint_t *ea = nullptr, *eb = nullptr;
  REQUIRE(tp->endpoint_open(a.ctx, 1, 0, ba.data(), &la, &ea) == CHORUS_OK);
  REQUIRE(tp->endpoint_open(b.ctx, 0, 0, bb.data(), &lb, &eb) == CHORUS_OK);
  int rc_b = -1;
  std::thread t([&] { rc_b = tp->endpoint_connect(eb, ba.data(), la, 10000); });
  int rc_a = tp->endpoint_connect(ea, bb.data(), lb, 10000);
  t.join();
  REQUIRE(rc_a == CHORUS_OK);
  REQUIRE(rc_b == CHORUS_OK);

  const char msg[] = "hello over auto";
  char got[64] = {0};
  REQUIRE(tp->post_recv(eb, got, sizeof got, nullptr, 7) == CHORUS_OK);
  REQUIRE(tp->post_send(ea, msg, sizeof msg, nullptr, 9) == CHORUS_OK);
  bool sent = false, received = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(sent && received) && std::chrono::steady_clock::now() < deadline) {
    chorus_tp_completion_t c[4];
    for (auto* ctx : {a.ctx, b.ctx}) {
      int n = tp->poll(ctx, c, 4);
      REQUIRE(n >= 0);
      for (int i = 0; i < n; ++i) {
        if (c[i].wr_id == 9) {
          CHECK(c[i].endpoint == ea);  // the composite endpoint, not the sub-transport's
          sent = true;
        }
        if (c[i].wr_id == 7) {
          CHECK(c[i].endpoint == eb);
          CHECK(c[i].byte_len == sizeof msg);
          received = true;
        }
      }
    }
  }
  CHECK(sent);
  CHECK(received);
  CHECK(std::strcmp(got, msg) == 0);
  // Idle: both sides' waits sleep out their timeout.
  CHECK(tp->wait(a.ctx, 20) == CHORUS_ERR_TIMEOUT);
  auto name_of = [](chorus_tp_context_t* ctx) {
    for (const auto& [name, peers] : auto_transport_peers(ctx))
      if (!peers.empty()) return name;
    return std::string("none");
  };
  return {name_of(a.ctx), name_of(b.ctx)};
}

}  // namespace

TEST_CASE("the composite connects over shm on one host and tcp across hosts", "[auto]") {
  CHECK(exchange("host-a", "host-a") == std::pair<std::string, std::string>{"shm", "shm"});
  CHECK(exchange("host-a", "host-b") == std::pair<std::string, std::string>{"tcp", "tcp"});
}

TEST_CASE("the composite refuses bad settings and names a missing sub-transport", "[auto]") {
  {
    std::vector<chorus_kv_t> kv = {{"colour", "red", "test.toml:3"}};
    Ctx c(0, kv);
    CHECK(c.rc == CHORUS_ERR_INVALID_ARGUMENT);
    std::string err = c.tp->last_error();
    CHECK(err.find("colour") != std::string::npos);
    CHECK(err.find("test.toml:3") != std::string::npos);
  }
  {
    std::vector<chorus_kv_t> kv = {{"fabric", "nosuchfabric", "test"}};
    Ctx c(0, kv);
    CHECK(c.rc == CHORUS_ERR_UNAVAILABLE);
    std::string err = c.tp->last_error();
    CHECK(err.find("fabric sub-transport 'nosuchfabric'") != std::string::npos);
    CHECK(err.find("libchorus-transport-nosuchfabric.so") != std::string::npos);
  }
  {
    std::vector<chorus_kv_t> kv = {{"verbs.device", "x", "test"}};
    Ctx c(0, kv);
    CHECK(c.rc == CHORUS_ERR_INVALID_ARGUMENT);
    CHECK(std::string(c.tp->last_error()).find("verbs.device") != std::string::npos);
  }
  {
    std::vector<chorus_kv_t> kv = {{"shm.no_such_key", "1", "test"}};
    Ctx c(0, kv);
    CHECK(c.rc == CHORUS_ERR_INVALID_ARGUMENT);
    CHECK(std::string(c.tp->last_error()).find("no_such_key") != std::string::npos);
  }
}

namespace {

/// An endpoint pair between two composite contexts, connected.
void connect(Ctx& x, int x_peer, Ctx& y, int y_peer, chorus_tp_endpoint_t*& ex,
             chorus_tp_endpoint_t*& ey) {
  const auto* tp = x.tp;
  std::vector<unsigned char> bx(4096), by(4096);
  size_t lx = bx.size(), ly = by.size();
  REQUIRE(tp->endpoint_open(x.ctx, x_peer, 0, bx.data(), &lx, &ex) == CHORUS_OK);
  REQUIRE(tp->endpoint_open(y.ctx, y_peer, 0, by.data(), &ly, &ey) == CHORUS_OK);
  int rc_y = -1;
  std::thread t([&] { rc_y = tp->endpoint_connect(ey, bx.data(), lx, 10000); });
  int rc_x = tp->endpoint_connect(ex, by.data(), ly, 10000);
  t.join();
  REQUIRE(rc_x == CHORUS_OK);
  REQUIRE(rc_y == CHORUS_OK);
}

struct Ctx3 : Ctx {
  Ctx3(int rank, const char* host) : Ctx(rank, {{"host_id", host, "test"}}, 3) {}
};

}  // namespace

TEST_CASE("with peers on both sub-transports, wait sleeps on both and wakes for either", "[auto]") {
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
  };
  Ctx3 a(0, "host-x"), b(1, "host-x"), c(2, "host-y");
  REQUIRE(a.rc == CHORUS_OK);
  REQUIRE(b.rc == CHORUS_OK);
  REQUIRE(c.rc == CHORUS_OK);
  const auto* tp = a.tp;
  chorus_tp_endpoint_t *ab = nullptr, *ba = nullptr, *ac = nullptr, *ca = nullptr;
  connect(a, 1, b, 0, ab, ba);
  connect(a, 2, c, 0, ac, ca);
  auto peers = auto_transport_peers(a.ctx);
  REQUIRE(peers.size() == 2);
  CHECK(peers[0] == std::pair<std::string, std::vector<int>>{"shm", {1}});
  CHECK(peers[1] == std::pair<std::string, std::vector<int>>{"tcp", {2}});

  // Idle: sleeps out the timeout. Spurious wake-ups are allowed (connection
  // set-up may leave a wake-up behind, and on a loaded machine it may come
  // late) but not a spin: a few calls at most, and the call that reports
  // TIMEOUT slept for its whole timeout.
  auto t0 = Clock::now();
  int calls = 0, last = CHORUS_OK;
  auto slept = Clock::now() - t0;
  while (last != CHORUS_ERR_TIMEOUT && calls < 10) {
    const auto call_start = Clock::now();
    last = tp->wait(a.ctx, 150);
    slept = Clock::now() - call_start;
    ++calls;
  }
  INFO("wait calls: " << calls);
  CHECK(last == CHORUS_ERR_TIMEOUT);
  CHECK(calls <= 3);
  CHECK(std::chrono::duration_cast<std::chrono::milliseconds>(slept).count() >= 140);

  char in[2][8] = {};
  REQUIRE(tp->post_recv(ab, in[0], sizeof in[0], nullptr, 1) == CHORUS_OK);
  REQUIRE(tp->post_recv(ac, in[1], sizeof in[1], nullptr, 2) == CHORUS_OK);
  // A peer sends after 100 ms, driving its own context on its own thread;
  // `a` must wake for it, whichever sub-transport carries it: a wait that
  // slept through the arrival would return TIMEOUT after kWaitMs instead.
  constexpr int kWaitMs = 20000;
  for (Ctx* sender : {static_cast<Ctx*>(&c), static_cast<Ctx*>(&b)}) {
    chorus_tp_endpoint_t* ep = sender == &c ? ca : ba;
    const uint64_t want = sender == &c ? 2 : 1;
    std::thread peer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const char msg[] = "wake";
      if (tp->post_send(ep, msg, sizeof msg, nullptr, 9) != CHORUS_OK) return;
      chorus_tp_completion_t comp[2];
      auto until = Clock::now() + std::chrono::seconds(5);
      while (Clock::now() < until && tp->poll(sender->ctx, comp, 2) == 0) tp->wait(sender->ctx, 10);
    });
    t0 = Clock::now();
    bool got = false;
    int timeouts = 0, waits = 0;
    while (!got && timeouts == 0 && waits < 100) {
      int rc = tp->wait(a.ctx, kWaitMs);
      ++waits;
      REQUIRE((rc == CHORUS_OK || rc == CHORUS_ERR_TIMEOUT));
      if (rc == CHORUS_ERR_TIMEOUT) ++timeouts;
      chorus_tp_completion_t comp[2];
      int n = tp->poll(a.ctx, comp, 2);
      REQUIRE(n >= 0);
      for (int i = 0; i < n; ++i) got = got || comp[i].wr_id == want;
    }
    auto took = ms_since(t0);
    peer.join();
    INFO("woke after " << took << " ms, " << waits << " wait calls");
    CHECK(got);
    CHECK(took >= 80);     // not before the peer sent
    CHECK(timeouts == 0);  // woken by the arrival, not at the wait's own timeout
    CHECK(waits <= 10);
  }
  CHECK(std::string(in[0]) == "wake");
  CHECK(std::string(in[1]) == "wake");

  // interrupt from another thread ends a wait on both: OK, where the wait's
  // own timeout would give TIMEOUT.
  std::atomic<bool> sent{false};
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    sent = true;
    tp->interrupt(a.ctx);
  });
  int rc = CHORUS_OK, waits = 0;
  bool after_interrupt = false;
  // A spurious wake-up before the interrupt is allowed. Like every caller,
  // the loop polls after each wait: wait may return at once while the
  // transport holds work that only poll takes in (a socket still readable).
  do {
    rc = tp->wait(a.ctx, kWaitMs);
    after_interrupt = sent;
    ++waits;
    chorus_tp_completion_t comp[2];
    REQUIRE(tp->poll(a.ctx, comp, 2) >= 0);
  } while (!after_interrupt && rc == CHORUS_OK && waits < 100);
  waker.join();
  INFO("wait calls: " << waits);
  CHECK(after_interrupt);
  CHECK(rc == CHORUS_OK);
  CHECK(waits <= 10);
}
