// WrRing: FIFO order and absolute indices across growth and wrap-around.
#include <catch2/catch.hpp>

#include <chorus/provider/wr_ring.hpp>

#include <cstdint>

using chorus::provider::WrRing;

TEST_CASE("a ring holds no slots until the first push, then grows only when full", "[provider]") {
  WrRing<std::uint64_t> ring;
  CHECK(ring.empty());
  CHECK(ring.capacity() == 0);
  ring.push(7);
  CHECK(ring.capacity() == WrRing<std::uint64_t>::kInitial);
  CHECK(ring.front() == 7);
  ring.pop();
  // Pushing and popping one at a time never needs a second slot set.
  for (std::uint64_t i = 0; i < 1000; ++i) {
    ring.push(i);
    CHECK(ring.front() == i);
    ring.pop();
  }
  CHECK(ring.capacity() == WrRing<std::uint64_t>::kInitial);
  CHECK(ring.head() == 1001);
  CHECK(ring.tail() == 1001);
}

TEST_CASE("growth keeps every entry at its absolute index, in order, when the live entries wrap",
          "[provider]") {
  WrRing<std::uint64_t> ring;
  // Move head and tail off zero so the live entries straddle the slot ends.
  for (std::uint64_t i = 0; i < 11; ++i) {
    ring.push(0);
    ring.pop();
  }
  const std::uint64_t first = ring.tail();
  for (std::uint64_t n = 0; n < 1024; ++n) {
    ring.push(first + n);
    // Every entry still answers at its own index right after each growth.
    if ((n & (n - 1)) == 0) {
      for (std::uint64_t i = first; i <= first + n; ++i) REQUIRE(ring.at(i) == i);
    }
  }
  CHECK(ring.capacity() == 1024);
  CHECK(ring.tail() - ring.head() == 1024);
  // Half out, half back in: wraps within the slots without growing.
  for (std::uint64_t i = 0; i < 512; ++i) {
    REQUIRE(ring.front() == first + i);
    ring.pop();
  }
  for (std::uint64_t i = 0; i < 512; ++i) ring.push(first + 1024 + i);
  CHECK(ring.capacity() == 1024);
  for (std::uint64_t i = first + 512; i < first + 1536; ++i) {
    REQUIRE(ring.front() == i);
    ring.pop();
  }
  CHECK(ring.empty());
}
