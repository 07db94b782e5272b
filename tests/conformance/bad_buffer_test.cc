// Receives posted into memory this process cannot write (issue #16): the
// receive fails as the caller's error, with the buffer named, the process
// does not crash, the peer is not blamed and the endpoint carries on.
#include "support.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

using namespace chorus::conformance;

namespace {

/// Transports that promise it (docs/shm.md, docs/transport-abi.md): others
/// may copy into the buffer with memcpy and die of SIGSEGV, as before.
bool checks_receive_buffers() {
  const std::string& t = Plugin::get().transport();
  return t == "tcp" || t == "shm" || t == "auto";
}

/// Address space laid out for one case: `pages` pages that are readable and
/// writable, then one page that `kind` makes unusable (or all of them, for
/// the kinds that spoil the whole buffer). Unmapped at the end of the case.
class Region {
 public:
  Region(std::size_t pages, const std::string& kind)
      : page_(static_cast<std::size_t>(::sysconf(_SC_PAGESIZE))), bytes_((pages + 1) * page_) {
    void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<unsigned char*>(p);
    std::memset(base_, 0x5A, bytes_);
    if (kind == "unmapped") {
      ::munmap(base_, bytes_);
      mapped_ = false;
    } else if (kind == "PROT_READ") {
      ::mprotect(base_, bytes_, PROT_READ);
    } else if (kind == "PROT_NONE") {
      ::mprotect(base_, bytes_, PROT_NONE);
    } else if (kind == "runs past its mapping") {
      ::munmap(base_ + pages * page_, page_);
    }
  }
  ~Region() {
    if (mapped_) ::munmap(base_, bytes_);
  }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  /// A receive buffer of `length` bytes that ends inside the bad last page.
  unsigned char* buffer_ending_in_last_page(std::size_t length) const {
    return base_ + bytes_ - page_ / 2 - length;
  }

 private:
  std::size_t page_;
  std::size_t bytes_;
  unsigned char* base_ = nullptr;
  bool mapped_ = true;
};

}  // namespace

TEST_CASE("a receive into memory that is not writable fails locally and the endpoint carries on",
          "[data][bad_buffer]") {
  CONFORMANCE_NEEDS_TRANSPORT();
  if (!checks_receive_buffers()) {
    WARN("not run: transport '" << Plugin::get().transport()
                                << "' does not promise to check receive buffers");
    return;
  }
  const std::string kind =
      GENERATE(as<std::string>{}, "unmapped", "PROT_READ", "PROT_NONE", "runs past its mapping");
  // One word, across a page boundary, by reference on shm, and large enough
  // to be read straight from the socket on tcp.
  const std::size_t size = GENERATE(as<std::size_t>{}, 8, 4097, 65536, (1u << 20) + 3);
  INFO("receive of " << size << " bytes into memory that is " << kind);

  Pair p;
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  Bytes out(size), next_out(64), next_in(64, 0);
  fill_pattern(out.data(), out.size(), 3);
  fill_pattern(next_out.data(), next_out.size(), 4);
  // Last, so that no allocation of the case lands where "unmapped" left a hole.
  Region region(size / page + 2, kind);
  unsigned char* bad = region.buffer_ending_in_last_page(size);

  REQUIRE_OK(tp().post_recv(p.eb[0].ep, bad, size, nullptr, 1));
  REQUIRE_OK(tp().post_recv(p.eb[0].ep, next_in.data(), next_in.size(), nullptr, 2));
  REQUIRE_OK(tp().post_send(p.ea[0].ep, out.data(), out.size(), nullptr, 11));
  REQUIRE_OK(tp().post_send(p.ea[0].ep, next_out.data(), next_out.size(), nullptr, 12));
  REQUIRE(pump_until(
      {&p.a, &p.b},
      [&] {
        return p.a.completions.size() + p.a.errors.size() == 2 &&
               p.b.completions.size() + p.b.errors.size() == 2;
      },
      30000));

  // The receiver: the bad receive failed, as the caller's error, naming
  // the buffer; the next one got the next message.
  REQUIRE(p.b.errors.size() == 1);
  const chorus_tp_error_t& e = p.b.errors[0];
  const std::string text = e.message;
  INFO("error: " << status_name(e.status) << ": " << text);
  CHECK(e.wr_id == 1);
  CHECK(e.opcode == CHORUS_TP_RECV);
  CHECK((e.status == CHORUS_ERR_INVALID_ARGUMENT || e.status == CHORUS_ERR_SYSTEM));
  CHECK(text.find("not writable memory") != std::string::npos);
  char where[32];
  std::snprintf(where, sizeof where, "%p", static_cast<void*>(bad));
  CHECK(text.find(where) != std::string::npos);
  REQUIRE(p.b.completions.size() == 1);
  CHECK(p.b.completions[0].wr_id == 2);
  CHECK(p.b.completions[0].byte_len == next_in.size());
  CHECK(next_in == next_out);

  // The sender: both sends completed; nobody was told of a lost peer.
  CHECK(p.a.errors.empty());
  CHECK(p.a.completions.size() == 2);
}
