// Cases specific to the built-in shared-memory transport (they know its
// address blob, docs/shm.md). They run only when the plugin under test is
// "shm".
#include "support.h"

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

using namespace chorus::conformance;

namespace {

#define SHM_ONLY()                                                                    \
  do {                                                                                \
    if (Plugin::get().transport() != "shm") {                                         \
      WARN("shm-specific case, not run for transport " << Plugin::get().transport()); \
      return;                                                                         \
    }                                                                                 \
  } while (0)

/// The "/proc/<pid>/fd/<fd>" of the context memory file a shm blob names
/// (layout 5: a NUL-terminated name of 40 bytes at offset 88).
std::string arena_name(const Bytes& blob) {
  REQUIRE(blob.size() == 128);
  char name[41] = {};
  std::memcpy(name, blob.data() + 88, 40);
  return name;
}

/// Bytes of memory the file behind `name` holds (its allocated blocks).
std::uint64_t file_bytes(const std::string& name) {
  struct stat st {};
  REQUIRE(::stat(name.c_str(), &st) == 0);
  return static_cast<std::uint64_t>(st.st_blocks) * 512;
}

}  // namespace

TEST_CASE("shm: an endpoint holds no descriptor of its own", "[shm][connect_poll]") {
  SHM_ONLY();
  Context a(0, 64);
  const std::size_t before = open_fds();
  std::vector<Endpoint> eps;
  for (int p = 1; p < 64; ++p) eps.push_back(open_endpoint(a, p, 0));
  CHECK(open_fds() == before);
  // Every segment lives in the one memory file of the context.
  for (const auto& e : eps) CHECK(arena_name(e.blob) == arena_name(eps.front().blob));
  for (auto& e : eps) REQUIRE_OK(tp().endpoint_close(e.ep));
  CHECK(open_fds() == before);
}

TEST_CASE("shm: messages sent after a polled connect wait for the peer to connect",
          "[shm][connect_poll]") {
  SHM_ONLY();
  Context a(0, 2), b(1, 2);
  Endpoint ea = open_endpoint(a, 1, 0);
  Endpoint eb = open_endpoint(b, 0, 0);
  REQUIRE_OK(connect_endpoint(ea, eb.blob, 0));
  // Rank 0 sends at once; rank 1 has not connected and posted nothing.
  const std::vector<std::size_t> sizes = {0, 100, 70001, 3};
  std::vector<Bytes> out, in;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    out.emplace_back(std::max<std::size_t>(sizes[i], 1));
    in.emplace_back(std::max<std::size_t>(sizes[i], 1));
    fill_pattern(out[i].data(), sizes[i], std::uint32_t(40 + i));
    REQUIRE_OK(tp().post_send(ea.ep, out[i].data(), sizes[i], nullptr, 100 + i));
  }
  REQUIRE(pump_until(
      {&a, &b}, [&] { return b.count(eb.ep, CHORUS_TP_OP_CONNECT_REQUEST) == 1; }, 10000));
  REQUIRE_OK(connect_endpoint(eb, ea.blob, 0));
  for (std::size_t i = 0; i < sizes.size(); ++i)
    REQUIRE_OK(tp().post_recv(eb.ep, in[i].data(), in[i].size(), nullptr, 200 + i));
  REQUIRE(pump_until(
      {&a, &b},
      [&] {
        return a.count(ea.ep, CHORUS_TP_SEND) == sizes.size() &&
               b.count(eb.ep, CHORUS_TP_RECV) == sizes.size();
      },
      10000));
  REQUIRE(a.errors.empty());
  REQUIRE(b.errors.empty());
  std::size_t i = 0;
  for (const auto& c : b.completions) {
    if (c.opcode != CHORUS_TP_RECV) continue;
    CHECK(c.wr_id == 200 + i);
    CHECK(c.byte_len == sizes[i]);
    CHECK_FALSE(pattern_mismatch(in[i].data(), sizes[i], std::uint32_t(40 + i)));
    ++i;
  }
  CHECK(b.count(eb.ep, CHORUS_TP_OP_CONNECT_REQUEST) == 1);
  CHECK(a.count(ea.ep, CHORUS_TP_OP_CONNECT_REQUEST) == 0);
}

TEST_CASE("shm: closed endpoints give their memory back", "[shm]") {
  SHM_ONLY();
  Context a(0, 2), b(1, 2);
  constexpr int kChannels = 4;
  std::vector<Endpoint> ea, eb;
  for (int c = 0; c < kChannels; ++c) {
    ea.push_back(open_endpoint(a, 1, c));
    eb.push_back(open_endpoint(b, 0, c));
  }
  const std::string file_a = arena_name(ea.front().blob), file_b = arena_name(eb.front().blob);
  // Unconnected endpoints touch their header page only.
  CHECK(file_bytes(file_a) <= (1 + kChannels) * 4096);
  for (int c = 0; c < kChannels; ++c) connect_pair(ea[size_t(c)], eb[size_t(c)]);
  // Connected, the rings are mapped in (at least 64 KiB each).
  CHECK(file_bytes(file_a) >= kChannels * (64u << 10));
  CHECK(file_bytes(file_b) >= kChannels * (64u << 10));
  // One side closes first (its peer still maps its segments), then the other.
  for (auto& e : eb) REQUIRE_OK(tp().endpoint_close(e.ep));
  for (int i = 0; i < 200; ++i) a.pump();
  for (auto& e : ea) REQUIRE_OK(tp().endpoint_close(e.ep));
  for (int i = 0; i < 200; ++i) b.pump();
  // What is left is each file's header page (and nothing comes out).
  CHECK(file_bytes(file_a) <= 4096);
  CHECK(file_bytes(file_b) <= 4096);
  CHECK(a.errors.empty());
  CHECK(b.errors.empty());
}
