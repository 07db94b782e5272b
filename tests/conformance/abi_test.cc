// The plugin table, contexts, capabilities, registration and configuration.
#include "support.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

using namespace chorus::conformance;

namespace {
/// Size of the v1 table at minor 0: everything up to and including `wait`.
constexpr std::size_t kMinor0TableSize =
    offsetof(chorus_transport_plugin_v1_t, wait) + sizeof(chorus_transport_plugin_v1_t::wait);
}  // namespace

TEST_CASE("plugin table is well-formed", "[abi]") {
  const Plugin& plugin = Plugin::get();
  const chorus_transport_plugin_v1_t& t = plugin.ops();
  INFO("plugin: " << plugin.path());

  CHECK(t.struct_size >= kMinor0TableSize);
  if (t.minor == CHORUS_TRANSPORT_ABI_MINOR)
    CHECK(t.struct_size == sizeof(chorus_transport_plugin_v1_t));
  REQUIRE(t.name != nullptr);
  CHECK(std::strlen(t.name) > 0);
  if (std::getenv("CHORUS_CONFORMANCE_PLUGIN") == nullptr)
    CHECK(std::string(t.name) == plugin.transport());

  // Mandatory ops.
  CHECK(t.init != nullptr);
  CHECK(t.last_error != nullptr);
  CHECK(t.context_open != nullptr);
  CHECK(t.context_close != nullptr);
  CHECK(t.get_caps != nullptr);
  CHECK(t.endpoint_open != nullptr);
  CHECK(t.endpoint_connect != nullptr);
  CHECK(t.endpoint_close != nullptr);
  CHECK(t.mem_register != nullptr);
  CHECK(t.mem_deregister != nullptr);
  CHECK(t.post_send != nullptr);
  CHECK(t.post_recv != nullptr);
  CHECK(t.poll != nullptr);
  CHECK(t.read_error != nullptr);
  CHECK(t.wait != nullptr);
  CHECK(t.last_error() != nullptr);

  // The symbol comes from the plugin itself, not from one of its dependencies.
  Dl_info where{};
  REQUIRE(::dladdr(&t, &where) != 0);
  void* self = ::dlopen(where.dli_fname, RTLD_NOW | RTLD_NOLOAD);
  CHECK(self == plugin.dl_handle());
  if (self != nullptr) ::dlclose(self);
}

TEST_CASE("the optional describe op writes a bounded, terminated line", "[abi]") {
  const chorus_transport_plugin_v1_t& t = Plugin::get().ops();
  const bool has_describe =
      t.struct_size >= offsetof(chorus_transport_plugin_v1_t, describe) + sizeof(t.describe) &&
      t.describe != nullptr;
  if (!has_describe) {
    WARN("describe (minor 1) is optional and this transport does not provide it, case not run");
    return;
  }
  char buf[1024];
  std::memset(buf, 'x', sizeof buf);
  const int rc = t.describe(buf, sizeof buf);
  CHECK((rc == CHORUS_OK || rc == CHORUS_ERR_UNAVAILABLE));
  const void* nul = std::memchr(buf, '\0', sizeof buf);
  REQUIRE(nul != nullptr);
  INFO("describe: " << buf);
  CHECK(std::strlen(buf) > 0);
  // Truncation: never writes past `len`, always terminates.
  char small[16];
  std::memset(small, 'x', sizeof small);
  t.describe(small, 8);
  CHECK(std::memchr(small, '\0', 8) != nullptr);
  for (std::size_t i = 8; i < sizeof small; ++i) CHECK(small[i] == 'x');
}

TEST_CASE("context capabilities and memory registration", "[abi]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Context ctx(0, 2);
  const chorus_tp_caps_t& caps = ctx.caps();
  CHECK(caps.struct_size >= sizeof(std::size_t));
  CHECK(caps.struct_size <= sizeof(chorus_tp_caps_t));
  CHECK(caps.max_message_size >= 1);
  CHECK(caps.max_outstanding_sends >= 1);
  CHECK(caps.max_outstanding_recvs >= 1);
  CHECK(caps.max_address_size >= 1);
  CHECK(caps.max_address_size <= 65536);

  Bytes buf(4096);
  chorus_tp_mr_t* mr = nullptr;
  REQUIRE_OK(tp().mem_register(ctx.get(), buf.data(), buf.size(), CHORUS_MEM_HOST, &mr));
  if (caps.flags & CHORUS_TP_CAP_NEEDS_REGISTRATION) CHECK(mr != nullptr);
  REQUIRE_OK(tp().mem_deregister(ctx.get(), mr));
  REQUIRE_OK(tp().mem_deregister(ctx.get(), nullptr));
  REQUIRE_OK(ctx.close());
}

TEST_CASE("endpoint_open reports its blob and rejects bad arguments", "[abi]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  Context ctx(0, 3);
  Endpoint ep = open_endpoint(ctx, 1, 0);
  CHECK(!ep.blob.empty());
  CHECK(ep.blob.size() <= ctx.caps().max_address_size);

  SECTION("a buffer that is too small") {
    unsigned char tiny[1];
    std::size_t len = sizeof tiny;
    chorus_tp_endpoint_t* out = nullptr;
    const int rc = tp().endpoint_open(ctx.get(), 2, 0, tiny, &len, &out);
    CHECK(rc != CHORUS_OK);
    CHECK(std::strlen(tp().last_error()) > 0);
  }
  SECTION("a peer rank outside the communicator") {
    Bytes blob(ctx.caps().max_address_size);
    std::size_t len = blob.size();
    chorus_tp_endpoint_t* out = nullptr;
    CHECK(tp().endpoint_open(ctx.get(), 3, 0, blob.data(), &len, &out) ==
          CHORUS_ERR_INVALID_ARGUMENT);
    CHECK(tp().endpoint_open(ctx.get(), -1, 0, blob.data(), &len, &out) ==
          CHORUS_ERR_INVALID_ARGUMENT);
  }
  REQUIRE_OK(tp().endpoint_close(ep.ep));
}

TEST_CASE("context info of every minor is accepted; the notice endpoint is no data channel",
          "[abi][info]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  using Info = chorus_tp_context_info_t;
  // Info as a core of minor 0, 2 and this header's minor fills it. Past
  // struct_size, data_channels holds 1 all the same: the plugin must not read it.
  const std::size_t info_size =
      GENERATE(offsetof(Info, config_count) + sizeof(size_t),
               offsetof(Info, job_key_len) + sizeof(size_t), sizeof(Info));
  const bool states_data_channels = info_size >= offsetof(Info, data_channels) + sizeof(int);
  INFO("info struct_size " << info_size << " of " << sizeof(Info));
  Context a(0, 2, {}, InfoOptions{info_size, 1}), b(1, 2, {}, InfoOptions{info_size, 1});
  // Channel 0 is the one data channel; channel 1 is what the core opens as
  // its peer-loss notice endpoint (data_channels = 1).
  std::vector<Endpoint> ea, eb;
  for (int c = 0; c < 2; ++c) {
    ea.push_back(open_endpoint(a, 1, c));
    eb.push_back(open_endpoint(b, 0, c));
  }
  for (std::size_t c = 0; c < 2; ++c) connect_pair(ea[c], eb[c]);

  // The notice endpoint carries messages like any other.
  Bytes out(48), in(64);
  fill_pattern(out.data(), out.size(), 5);
  Registration ra_out(a, out.data(), out.size()), ra_in(a, in.data(), in.size());
  Registration rb_in(b, in.data(), in.size());
  REQUIRE_OK(tp().post_recv(eb[1].ep, in.data(), in.size(), rb_in.mr(), 1));
  REQUIRE_OK(tp().post_send(ea[1].ep, out.data(), out.size(), ra_out.mr(), 2));
  REQUIRE(pump_until(
      {&a, &b}, [&] { return a.completions.size() == 1 && b.completions.size() == 1; }, 10000));
  REQUIRE(a.errors.empty());
  REQUIRE(b.errors.empty());
  CHECK(b.completions[0].byte_len == out.size());
  CHECK_FALSE(pattern_mismatch(in.data(), out.size(), 5));

  // Its loss is reported, and with data_channels stated, neither the error
  // nor the log calls it "channel 1": the user configured one channel.
  Plugin::get().clear_logs();
  REQUIRE_OK(tp().post_recv(ea[1].ep, in.data(), in.size(), ra_in.mr(), 3));
  REQUIRE_OK(tp().endpoint_close(eb[1].ep));
  REQUIRE(pump_until(
      {&a, &b}, [&] { return !a.errors.empty(); }, 10000));
  const chorus_tp_error_t& e = a.errors.front();
  INFO("error: " << e.message);
  CHECK(e.wr_id == 3);
  CHECK(e.status == CHORUS_ERR_PEER_LOST);
  CHECK(e.peer_rank == 1);
  CHECK(e.endpoint == ea[1].ep);
  if (states_data_channels) {
    CHECK_THAT(std::string(e.message), !Catch::Contains("channel 1"));
    for (const std::string& line : Plugin::get().logs()) {
      INFO("logged: " << line);
      CHECK_THAT(line, !Catch::Contains("channel 1"));
    }
  }
  REQUIRE_OK(tp().endpoint_close(ea[1].ep));
  REQUIRE_OK(tp().endpoint_close(ea[0].ep));
  REQUIRE_OK(tp().endpoint_close(eb[0].ep));
}

TEST_CASE("an unknown configuration key is rejected by name", "[abi][config]") {
  std::vector<chorus_kv_t> kv;
  for (const auto& [k, v] : Plugin::get().env_config())
    kv.push_back({k.c_str(), v.c_str(), "conformance"});
  kv.push_back({"conformance_no_such_key", "1", "conformance-suite.toml:7"});
  chorus_tp_context_info_t info{};
  info.struct_size = sizeof info;
  info.rank = 0;
  info.size = 2;
  info.bind_address = Plugin::get().bind_address();
  info.config = kv.data();
  info.config_count = kv.size();
  chorus_tp_context_t* ctx = nullptr;
  const int rc = tp().context_open(&info, &ctx);
  if (rc == CHORUS_OK) tp().context_close(ctx);
  REQUIRE(rc == CHORUS_ERR_INVALID_ARGUMENT);
  const std::string message = tp().last_error();
  INFO("last_error: " << message);
  CHECK(message.find("conformance_no_such_key") != std::string::npos);
  CHECK(message.find("conformance-suite.toml:7") != std::string::npos);
}
