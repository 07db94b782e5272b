// store() and load(): the byte order every wire format uses.
#include <catch2/catch.hpp>

#include <chorus/provider/little_endian.hpp>

#include <array>
#include <cstddef>
#include <cstdint>

using namespace chorus::provider;

TEST_CASE("store writes the least significant byte first, at any offset", "[provider]") {
  std::array<std::byte, 16> buf{};
  little_endian::store<std::uint32_t>(buf.data() + 1, 0x46524843u);  // "CHRF"
  CHECK(buf[0] == std::byte{0});
  CHECK(buf[1] == std::byte{'C'});
  CHECK(buf[2] == std::byte{'H'});
  CHECK(buf[3] == std::byte{'R'});
  CHECK(buf[4] == std::byte{'F'});
  CHECK(buf[5] == std::byte{0});

  little_endian::store<std::uint16_t>(buf.data() + 6, 0x0201);
  CHECK(buf[6] == std::byte{1});
  CHECK(buf[7] == std::byte{2});

  little_endian::store<std::int32_t>(buf.data() + 8, -2);
  CHECK(buf[8] == std::byte{0xfe});
  CHECK(buf[11] == std::byte{0xff});
}

TEST_CASE("load reads back what store wrote", "[provider]") {
  std::array<std::byte, 24> buf{};
  little_endian::store<std::uint64_t>(buf.data() + 3, 0x0123456789abcdefull);
  CHECK(buf[3] == std::byte{0xef});
  CHECK(buf[10] == std::byte{0x01});
  CHECK(little_endian::load<std::uint64_t>(buf.data() + 3) == 0x0123456789abcdefull);
  little_endian::store<std::int32_t>(buf.data() + 13, -123456);
  CHECK(little_endian::load<std::int32_t>(buf.data() + 13) == -123456);
  little_endian::store<std::uint8_t>(buf.data() + 20, 0xa5);
  CHECK(little_endian::load<std::uint8_t>(buf.data() + 20) == 0xa5);
}
