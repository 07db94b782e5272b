// The mesh's scratch cache (algorithms/mesh/mesh_scratch.h): a buffer goes
// back to the cache when its task ends and comes out again for the next one;
// two tasks at once never share one; the larger of two returned buffers stays.
#include <catch2/catch.hpp>

#include "algorithms/mesh/mesh_scratch.h"

#include <cstring>

using chorus::mesh::Scratch;
using chorus::mesh::ScratchCache;

TEST_CASE("scratch: a later task reuses the buffer an earlier one gave back", "[mesh]") {
  ScratchCache cache;
  std::byte* first = nullptr;
  {
    Scratch s;
    first = s.borrow(cache, 1000);
    REQUIRE(first != nullptr);
    std::memset(first, 0x5a, 1000);  // the whole requested size is usable
  }
  Scratch again;
  CHECK(again.borrow(cache, 600) == first);  // smaller requests fit the cached one
}

TEST_CASE("scratch: tasks at the same time get distinct buffers", "[mesh]") {
  ScratchCache cache;
  Scratch a, b;
  std::byte* pa = a.borrow(cache, 256);
  std::byte* pb = b.borrow(cache, 256);
  CHECK(pa != pb);
}

TEST_CASE("scratch: the cache keeps the larger buffer and grows on demand", "[mesh]") {
  ScratchCache cache;
  std::byte* big = nullptr;
  {
    Scratch small, large;
    small.borrow(cache, 100);
    big = large.borrow(cache, 10000);
  }  // both come back: the 10000-byte one stays
  Scratch s;
  CHECK(s.borrow(cache, 10000) == big);
  Scratch bigger;
  std::byte* p = bigger.borrow(cache, 20000);  // nothing cached that large: a new one
  CHECK(p != big);
  std::memset(p, 1, 20000);
}
