// ReceiveBufferCheck (include/chorus/provider/receive_buffer_check.hpp):
// good, unmapped, read-only and partly mapped buffers, the bytes left as
// they were, and the remembered ranges.
#include <chorus/provider/receive_buffer_check.hpp>

#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

using chorus::provider::ReceiveBufferCheck;

namespace {

const std::size_t kPage = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));

unsigned char* map(std::size_t pages) {
  void* p =
      ::mmap(nullptr, pages * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(p != MAP_FAILED);
  return static_cast<unsigned char*>(p);
}

}  // namespace

TEST_CASE("ReceiveBufferCheck accepts writable memory and leaves its bytes alone",
          "[provider][receive_buffer_check]") {
  ReceiveBufferCheck check;
  std::vector<unsigned char> heap(3 * kPage + 5);
  for (std::size_t i = 0; i < heap.size(); ++i) heap[i] = static_cast<unsigned char>(i * 7);
  const std::vector<unsigned char> before = heap;
  CHECK(check.check(heap.data(), heap.size()) == 0);
  CHECK(check.check(heap.data() + 1, 8) == 0);  // inside the remembered range
  CHECK(heap == before);
  CHECK(check.check(nullptr, 0) == 0);
  unsigned char word[8];
  CHECK(check.check(word, sizeof word) == 0);
}

TEST_CASE("ReceiveBufferCheck joins neighbouring good ranges", "[provider][receive_buffer_check]") {
  ReceiveBufferCheck check;
  const std::size_t n = ReceiveBufferCheck::kRanges + 4;
  unsigned char* p = map(n);
  for (std::size_t i = 0; i < n; ++i) CHECK(check.check(p + i * kPage, kPage) == 0);
  // One joined range now covers all of it: unmapping a page in the middle
  // is not seen (the documented limit), which shows nothing was evicted.
  ::munmap(p + kPage, kPage);
  CHECK(check.check(p, n * kPage) == 0);
  ::munmap(p, kPage);
  ::munmap(p + 2 * kPage, (n - 2) * kPage);
}

TEST_CASE("ReceiveBufferCheck refuses unmapped, read-only and partly mapped buffers",
          "[provider][receive_buffer_check]") {
  ReceiveBufferCheck check;
  unsigned char* p = map(4);
  SECTION("unmapped") {
    ::munmap(p, 4 * kPage);
    CHECK(check.check(p + 10, 100) == EFAULT);
    CHECK(check.check(p + 10, 100) == EFAULT);  // a failure is not remembered
    return;
  }
  SECTION("read-only") {
    ::mprotect(p, 4 * kPage, PROT_READ);
    CHECK(check.check(p, 8) == EFAULT);
  }
  SECTION("PROT_NONE") {
    ::mprotect(p, 4 * kPage, PROT_NONE);
    CHECK(check.check(p, 4 * kPage) == EFAULT);
  }
  SECTION("the last page of the buffer is not mapped") {
    ::munmap(p + 3 * kPage, kPage);
    CHECK(check.check(p, 3 * kPage) == 0);
    CHECK(check.check(p + 100, 3 * kPage) == EFAULT);
    ::munmap(p, 3 * kPage);
    return;
  }
  SECTION("a hole in the middle") {
    ::munmap(p + kPage, kPage);
    CHECK(check.check(p, 4 * kPage) == EFAULT);
    ::munmap(p, kPage);
    ::munmap(p + 2 * kPage, 2 * kPage);
    return;
  }
  ::munmap(p, 4 * kPage);
}

TEST_CASE("ReceiveBufferCheck describes the buffer", "[provider][receive_buffer_check]") {
  const std::string text =
      ReceiveBufferCheck::describe(reinterpret_cast<void*>(0x1000), 42, EFAULT);
  CHECK(text.find("0x1000") != std::string::npos);
  CHECK(text.find("42 bytes") != std::string::npos);
  CHECK(text.find("not writable memory") != std::string::npos);
  CHECK(text.find("Bad address") != std::string::npos);
}
