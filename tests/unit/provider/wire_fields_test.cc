// wire::encode, decode and size over a struct's field list: byte layout,
// constants, reserved bytes, nested structs, valid() and short buffers.
#include <catch2/catch.hpp>

#include <chorus/provider/wire_fields.hpp>

#include <array>
#include <cstddef>
#include <cstdint>

namespace wire = chorus::provider::wire;

namespace {

enum class Kind : std::uint8_t { kOne = 1, kTwo = 2 };

struct Inner : wire::EndpointId {
  std::uint16_t port = 0;

  static constexpr void fields(auto& io, auto& s) {
    EndpointId::fields(io, s);
    io(s.port);
  }
  bool valid() const { return port != 0; }
};

struct Outer {
  static constexpr std::uint32_t kMagic = 0x11223344;
  Kind kind = Kind::kOne;
  std::size_t name_len = 0;
  std::array<std::byte, 3> bytes{};
  Inner inner;

  static constexpr void fields(auto& io, auto& s) {
    io(wire::Expect{kMagic}, s.kind, wire::Zero<1>{}, wire::as<std::uint16_t>(s.name_len), s.bytes,
       wire::Skip<1>{}, s.inner);
  }
};

constexpr std::size_t kOuterSize = 4 + 1 + 1 + 2 + 3 + 1 + 14;
static_assert(wire::size<Inner>() == 14);
static_assert(wire::size<Outer>() == kOuterSize);

Outer sample() {
  Outer o;
  o.kind = Kind::kTwo;
  o.name_len = 0x0102;
  o.bytes = {std::byte{0xaa}, std::byte{0xbb}, std::byte{0xcc}};
  o.inner.rank = 3;
  o.inner.peer_rank = -2;
  o.inner.channel = 1;
  o.inner.port = 0x8081;
  return o;
}

}  // namespace

TEST_CASE("wire::encode writes the fields in order, little-endian", "[provider]") {
  std::array<std::byte, kOuterSize> buf{};
  buf.fill(std::byte{0x5a});
  CHECK(wire::encode(sample(), buf.data()) == kOuterSize);
  const std::array<unsigned, kOuterSize> expected{0x44, 0x33, 0x22, 0x11, 2, 0, 0x02, 0x01, 0xaa,
                                                  0xbb, 0xcc, 0,    3,    0, 0, 0,    0xfe, 0xff,
                                                  0xff, 0xff, 0x01, 0,    0, 0, 0x81, 0x80};
  for (std::size_t i = 0; i < kOuterSize; ++i) {
    INFO("byte " << i);
    CHECK(static_cast<unsigned>(buf[i]) == expected[i]);
  }
}

TEST_CASE("wire::decode reads back what encode wrote and checks it", "[provider]") {
  std::array<std::byte, kOuterSize + 4> buf{};
  wire::encode(sample(), buf.data());

  const auto o = wire::decode<Outer>(buf.data(), kOuterSize);
  REQUIRE(o);
  CHECK(o->kind == Kind::kTwo);
  CHECK(o->name_len == 0x0102);
  CHECK(o->bytes == sample().bytes);
  CHECK(o->inner == sample().inner);
  CHECK(o->inner.port == 0x8081);
  CHECK(o->inner.is(3, -2, 1));
  CHECK_FALSE(o->inner.is(3, -2, 0));
  // Longer input: the fields are a prefix.
  CHECK(wire::decode<Outer>(buf.data(), buf.size()));

  SECTION("too short, or NULL") {
    CHECK_FALSE(wire::decode<Outer>(buf.data(), kOuterSize - 1));
    CHECK_FALSE(wire::decode<Outer>(nullptr, kOuterSize));
  }
  SECTION("a wrong constant") {
    buf[3] = std::byte{0x12};
    CHECK_FALSE(wire::decode<Outer>(buf.data(), kOuterSize));
  }
  SECTION("a reserved byte that is not zero") {
    buf[5] = std::byte{1};
    CHECK_FALSE(wire::decode<Outer>(buf.data(), kOuterSize));
  }
  SECTION("skipped bytes are not looked at") {
    buf[11] = std::byte{0xff};
    CHECK(wire::decode<Outer>(buf.data(), kOuterSize));
  }
  SECTION("a nested struct's valid() says no") {
    buf[24] = buf[25] = std::byte{0};
    CHECK_FALSE(wire::decode<Outer>(buf.data(), kOuterSize));
  }
}

TEST_CASE("wire::decode_into leaves its output alone on failure", "[provider]") {
  std::array<std::byte, kOuterSize> buf{};
  wire::encode(sample(), buf.data());
  buf[0] = std::byte{0};
  Outer o;
  o.name_len = 7;
  CHECK_FALSE(wire::decode_into(buf.data(), buf.size(), o));
  CHECK(o.name_len == 7);
  buf[0] = std::byte{0x44};
  CHECK(wire::decode_into(buf.data(), buf.size(), o));
  CHECK(o.name_len == 0x0102);
}
