// Unit tests of the side-channel wire format (core/frame.h): no sockets.
#include "core/frame.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <new>
#include <random>

// Counts heap allocations made by the current thread, so a test can show that
// decoding a hostile header allocates nothing. Every unaligned form of
// new/delete is replaced, so that pairs always match (sanitizers check that);
// the aligned forms keep the runtime's own pair.
namespace {
thread_local std::size_t g_allocations = 0;

void* counted_alloc(std::size_t size) noexcept {
  ++g_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
}  // namespace

void* operator new(std::size_t size) {
  if (void* p = counted_alloc(size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
  if (void* p = counted_alloc(size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return counted_alloc(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  return counted_alloc(size);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace chorus::core::frame {
namespace {

std::vector<std::byte> bytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) out[i] = static_cast<std::byte>(s[i]);
  return out;
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return out;
}

std::vector<std::byte> raw_header(std::uint32_t magic, std::uint16_t version, std::uint16_t type,
                                  std::uint32_t length) {
  std::vector<std::byte> out(kHeaderSize);
  store_le(out.data(), magic);
  store_le(out.data() + 4, version);
  store_le(out.data() + 6, type);
  store_le(out.data() + 8, length);
  return out;
}

TEST_CASE("frame header layout is little-endian and starts with CHRS", "[frame]") {
  const auto h = encode_header(Type::kDeliver, 0x01020304u);
  const std::vector<std::byte> expect = {
      std::byte{'C'}, std::byte{'H'}, std::byte{'R'}, std::byte{'S'},  // magic
      std::byte{3},   std::byte{0},                                    // version
      std::byte{5},   std::byte{0},                                    // type
      std::byte{4},   std::byte{3},   std::byte{2},   std::byte{1}};   // length
  CHECK(std::vector<std::byte>(h.begin(), h.end()) == expect);
}

TEST_CASE("frame round trip: exact bytes back, consumed is the frame", "[frame]") {
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{4096}}) {
    const auto payload = pattern(n, 7);
    const auto wire = encode_frame(Type::kAbort, payload);
    REQUIRE(wire.size() == kHeaderSize + n);
    const Decoded d = decode_frame(wire);
    REQUIRE(d.state == DecodeState::kFrame);
    CHECK(d.header.type == static_cast<std::uint16_t>(Type::kAbort));
    CHECK(d.consumed == wire.size());
    CHECK(std::vector<std::byte>(d.payload.begin(), d.payload.end()) == payload);
  }
}

TEST_CASE("frame decoder walks back-to-back frames", "[frame]") {
  std::vector<std::byte> wire;
  const auto a = encode_frame(Type::kHello, encode_hello({3, 8, 42}));
  const auto b = encode_frame(Type::kWelcome, encode_welcome({8, 42, {}}));
  wire.insert(wire.end(), a.begin(), a.end());
  wire.insert(wire.end(), b.begin(), b.end());
  std::span<const std::byte> rest(wire);
  const Decoded first = decode_frame(rest);
  REQUIRE(first.state == DecodeState::kFrame);
  CHECK(first.header.type == static_cast<std::uint16_t>(Type::kHello));
  rest = rest.subspan(first.consumed);
  const Decoded second = decode_frame(rest);
  REQUIRE(second.state == DecodeState::kFrame);
  CHECK(second.header.type == static_cast<std::uint16_t>(Type::kWelcome));
  CHECK(second.consumed == rest.size());
}

TEST_CASE("frame decoder asks for more on every partial prefix", "[frame]") {
  const auto wire = encode_frame(Type::kContribute, pattern(100, 1));
  for (std::size_t cut = 0; cut < wire.size(); ++cut) {
    const Decoded d = decode_frame(std::span(wire).first(cut));
    INFO("prefix of " << cut << " bytes");
    REQUIRE(d.state == DecodeState::kNeedMore);
    CHECK(d.needed == (cut < kHeaderSize ? kHeaderSize : wire.size()));
  }
}

TEST_CASE("frame decoder refuses bad magic, version and type", "[frame]") {
  SECTION("bad magic, e.g. an HTTP request") {
    const auto wire = bytes("GET / HTTP/1.1\r\n\r\n");
    const Decoded d = decode_frame(wire);
    REQUIRE(d.state == DecodeState::kError);
    CHECK(d.error == Error::kBadMagic);
    CHECK(describe(d.error, d.header) == "bad magic 0x20544547 (not a Chorus side-channel peer)");
  }
  SECTION("other protocol version") {
    const Decoded d = decode_frame(raw_header(kMagic, 1, 1, 0));
    REQUIRE(d.state == DecodeState::kError);
    CHECK(d.error == Error::kBadVersion);
    CHECK_THAT(describe(d.error, d.header), Catch::Contains("version 1"));
  }
  SECTION("unknown types") {
    for (const std::uint16_t type : {0, 10, 0xffff}) {
      const Decoded d = decode_frame(raw_header(kMagic, kVersion, type, 0));
      REQUIRE(d.state == DecodeState::kError);
      CHECK(d.error == Error::kUnknownType);
    }
  }
}

TEST_CASE("frame decoder checks length against the type's maximum", "[frame]") {
  for (const Type type :
       {Type::kHello, Type::kWelcome, Type::kAbort, Type::kContribute, Type::kDeliver,
        Type::kAuthInit, Type::kAuthChallenge, Type::kAuthProof}) {
    INFO(type_name(type));
    const auto max = static_cast<std::uint32_t>(max_payload(type));
    const Decoded at_max =
        decode_frame(raw_header(kMagic, kVersion, static_cast<std::uint16_t>(type), max));
    CHECK(at_max.state == DecodeState::kNeedMore);
    CHECK(at_max.needed == kHeaderSize + max);
    const Decoded over =
        decode_frame(raw_header(kMagic, kVersion, static_cast<std::uint16_t>(type), max + 1));
    CHECK(over.state == DecodeState::kError);
    CHECK(over.error == Error::kTooLong);
  }
  CHECK(max_payload(Type::kContribute) == kOpHeaderSize + kMaxBlob);
}

TEST_CASE("an oversized length is refused without allocating", "[frame]") {
  const auto wire =
      raw_header(kMagic, kVersion, static_cast<std::uint16_t>(Type::kDeliver), 0xfffffff0u);
  const std::size_t before = g_allocations;
  const Decoded d = decode_frame(wire);
  const Error err = check_header(read_header(std::span(wire).first<kHeaderSize>()));
  const std::size_t after = g_allocations;
  CHECK(d.state == DecodeState::kError);
  CHECK(d.error == Error::kTooLong);
  CHECK(err == Error::kTooLong);
  CHECK(after == before);
  CHECK_THAT(describe(d.error, d.header), Catch::Contains("4294967280 bytes exceeds"));
}

TEST_CASE("decoding a valid frame does not allocate either", "[frame]") {
  const auto wire = encode_frame(Type::kDeliver, pattern(1000, 3));
  const std::size_t before = g_allocations;
  const Decoded d = decode_frame(wire);
  const auto op = decode_op(d.payload);
  CHECK(g_allocations == before);
  CHECK(d.state == DecodeState::kFrame);
  CHECK_FALSE(op.has_value());  // the pattern's op field is not a known op
}

TEST_CASE("payload codecs round trip and refuse short input", "[frame]") {
  SECTION("hello") {
    const Hello h{7, 16, 0x0123456789abcdefull};
    const auto wire = encode_hello(h);
    const auto back = decode_hello(wire);
    REQUIRE(back);
    CHECK(back->rank == 7);
    CHECK(back->size == 16);
    CHECK(back->job_tag == 0x0123456789abcdefull);
    CHECK_FALSE(decode_hello(std::span(wire).first(kHelloSize - 1)));
  }
  SECTION("welcome") {
    const auto wire = encode_welcome({16, 99, {}});
    const auto back = decode_welcome(wire);
    REQUIRE(back);
    CHECK(back->size == 16);
    CHECK(back->job_tag == 99);
    CHECK(back->connect_to.empty());
    CHECK_FALSE(decode_welcome(std::span(wire).first(kWelcomeSize - 1)));
  }
  SECTION("listen addresses in a hello and a welcome") {
    Address a;
    a.port = 40001;
    a.family = 4;
    a.bytes = {127, 0, 0, 1};
    Address b;
    b.port = 2;
    b.family = 6;
    b.bytes[15] = 1;
    const auto hello = encode_hello({3, 8, 42, a});
    const auto h = decode_hello(hello);
    REQUIRE(h);
    CHECK(h->listen.port == 40001);
    CHECK(h->listen.family == 4);
    CHECK(h->listen.bytes == a.bytes);
    const auto welcome = encode_welcome({8, 42, {a, b}});
    CHECK(welcome.size() == kWelcomeSize + 2 * kAddressSize);
    const auto w = decode_welcome(welcome);
    REQUIRE(w);
    REQUIRE(w->connect_to.size() == 2);
    CHECK(w->connect_to[1].family == 6);
    CHECK(w->connect_to[1].bytes == b.bytes);
    // A cut address is ignored; a non-zero reserved byte refuses the frame.
    CHECK(decode_welcome(std::span(welcome).first(welcome.size() - 1))->connect_to.size() == 1);
    auto bad = welcome;
    bad[kWelcomeSize + 3] = std::byte{1};
    CHECK_FALSE(decode_welcome(bad));
    auto bad_hello = hello;
    bad_hello[16 + 3] = std::byte{1};
    CHECK_FALSE(decode_hello(bad_hello));
  }
  SECTION("abort, with the text cut at the limit") {
    const auto wire = encode_abort(-4, "rank 2: gone");
    const auto back = decode_abort(wire);
    REQUIRE(back);
    CHECK(back->code == -4);
    CHECK(back->text == "rank 2: gone");
    CHECK_FALSE(decode_abort(std::span(wire).first(3)));
    const std::string long_text(kMaxAbortText + 100, 'x');
    const auto cut = encode_abort(-1, long_text);
    CHECK(cut.size() == max_payload(Type::kAbort));
    CHECK(decode_abort(cut)->text.size() == kMaxAbortText);
  }
  SECTION("op header") {
    const auto wire = encode_op({123456789012ull, Op::kBroadcast, 3});
    const auto back = decode_op(wire);
    REQUIRE(back);
    CHECK(back->seq == 123456789012ull);
    CHECK(back->op == Op::kBroadcast);
    CHECK(back->arg == 3);
    CHECK(back->flags == 0);
    CHECK(decode_op(encode_op({1, Op::kAllGather, 4, kMorePieces}))->flags == kMorePieces);
    CHECK_FALSE(decode_op(std::span(wire).first(kOpHeaderSize - 1)));
    auto unknown = wire;
    store_le(unknown.data() + 8, std::uint16_t{9});
    CHECK_FALSE(decode_op(unknown));
  }
  SECTION("longer payloads (fields appended later) are accepted") {
    std::vector<std::byte> longer(kHelloSize + 8, std::byte{0});
    const auto h = encode_hello({1, 2, 3});
    std::copy(h.begin(), h.end(), longer.begin());
    CHECK(decode_hello(longer)->size == 2);
  }
}

TEST_CASE("job tag depends on the token", "[frame]") {
  CHECK(job_tag("") == job_tag(""));
  CHECK(job_tag("job-a") != job_tag("job-b"));
  CHECK(job_tag("") != job_tag("x"));
  static_assert(job_tag("abc") == job_tag("abc"));
}

TEST_CASE("frame decoder survives random input", "[frame]") {
  std::mt19937 rng(12345);
  std::vector<std::byte> buf;
  for (int i = 0; i < 20000; ++i) {
    buf.resize(rng() % 64);
    for (auto& b : buf) b = static_cast<std::byte>(rng());
    // Half the time a valid magic and version, so the later checks run too.
    if (buf.size() >= 8 && (i & 1) != 0) {
      store_le(buf.data(), kMagic);
      store_le(buf.data() + 4, kVersion);
      store_le(buf.data() + 6, static_cast<std::uint16_t>(rng() % 7));
      if (buf.size() >= kHeaderSize)
        store_le(buf.data() + 8, static_cast<std::uint32_t>(rng() % 80));
    }
    const Decoded d = decode_frame(buf);
    switch (d.state) {
      case DecodeState::kFrame:
        REQUIRE(d.consumed <= buf.size());
        REQUIRE(d.payload.size() == d.header.length);
        (void)decode_hello(d.payload);
        (void)decode_welcome(d.payload);
        (void)decode_abort(d.payload);
        (void)decode_op(d.payload);
        break;
      case DecodeState::kNeedMore:
        REQUIRE(d.needed > buf.size());
        break;
      case DecodeState::kError:
        REQUIRE(d.error != Error::kNone);
        break;
    }
  }
}

}  // namespace
}  // namespace chorus::core::frame

TEST_CASE("authentication payloads round-trip and refuse short input", "[frame][auth]") {
  using namespace chorus::core::frame;
  AuthChallenge c;
  for (std::size_t i = 0; i < c.root_nonce.size(); ++i) {
    c.root_nonce[i] = static_cast<std::byte>(i);
    c.proof[i] = static_cast<std::byte>(200 - i);
  }
  const auto wire = encode_auth_challenge(c);
  const auto back = decode_auth_challenge(wire);
  REQUIRE(back);
  CHECK(back->root_nonce == c.root_nonce);
  CHECK(back->proof == c.proof);
  CHECK_FALSE(decode_auth_challenge(std::span(wire).first(kAuthChallengeSize - 1)));
  CHECK_FALSE(decode_auth_init(std::span(wire).first(kAuthInitSize - 1)));
  CHECK_FALSE(decode_auth_proof(std::span(wire).first(kAuthProofSize - 1)));
}
