#include <catch2/catch.hpp>

#include "core/auto_transport.h"
#include "core/config.h"

#include <unistd.h>

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

Result<Config> config_from(std::vector<std::string> api, std::map<std::string, std::string> env = {}) {
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

  auto env = config_from({}, {{"CHORUS_TRANSPORT", "auto"}, {"CHORUS_TRANSPORT_AUTO_FABRIC", "ofi"},
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
  auto cfg = config_from({"transport.name=\"auto\"", "transport.tcp.sockets=4", "transport.shm.spin_us=0",
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
  Ctx(int rank, std::vector<chorus_kv_t> kv) {
    chorus_tp_context_info_t info{};
    info.struct_size = sizeof info;
    info.rank = rank;
    info.size = 2;
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
