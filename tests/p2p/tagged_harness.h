// What every case of tagged_check shares: the job (communicator, rank,
// size), per-case results, message contents computed from (sender,
// receiver, tag, salt), the sizes around the eager limit, checked send and
// receive helpers, and the pairing of ranks. Single-threaded except where a
// function says otherwise.
#pragma once

#include <chorus/chorus.h>
#include <chorus/chorus.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace chorus::p2p_test {

// P2pEngine::kEagerBytes (core/p2p_engine.h): messages up to this many bytes
// are sent at once; larger ones wait for their receive (rendezvous). The
// mismatch case pins the boundary: above it a refused send fails too.
constexpr size_t kEagerBytes = 8160;
static_assert(kEagerBytes % 8 == 0, "the eager sizes assume a whole number of elements");
// The multi-MiB size: several MiB and not a multiple of a page.
constexpr size_t kBigBytes = (3u << 20) + 4096 + 24;
constexpr int kMarkerTag = 1;
constexpr int kMaxReportedPerCase = 12;
constexpr unsigned char kSentinel = 0xA5;

// Element types the cases rotate through (bool is left out: its elements
// are 0 or 1, and these messages carry arbitrary bytes).
constexpr int kDtypes[] = {CHORUS_INT32,   CHORUS_FLOAT64, CHORUS_UINT8, CHORUS_FLOAT16,
                           CHORUS_FLOAT32, CHORUS_INT64,   CHORUS_INT16, CHORUS_COMPLEX64,
                           CHORUS_UINT32,  CHORUS_BFLOAT16};
constexpr size_t kDtypeCount = sizeof(kDtypes) / sizeof(kDtypes[0]);

/// The world communicator of the job, this rank and the size.
extern chorus_comm_t* g_comm;
extern int g_rank;
extern int g_size;

// ---- results ----

struct CaseResult {
  std::string name;
  long checks = 0;
  long failures = 0;
};
/// The running case; g_step says what it is doing, for failure lines.
extern CaseResult g_case;
extern std::string g_step;
extern std::vector<std::string> g_failed_cases;

/// A failure of the running case: printed with the rank, case and step.
void fail(const std::string& what);
void expect(bool ok, const std::string& what);
/// The status name, with chorus_last_error() for an error.
std::string rc_text(int rc);
/// True when `rc` is `want`; a failure otherwise.
bool expect_rc(int rc, int want, const std::string& what);
/// Runs one case and prints its result line.
void run_case(const std::string& name, const std::function<void()>& body);

// ---- data ----

uint64_t mix(uint64_t x);
/// The content of the message `src` sends `dst` with `tag` and `salt`.
uint64_t key_of(int src, int dst, int tag, uint64_t salt);
void fill(unsigned char* p, size_t bytes, uint64_t key);
/// Every element of `p` against the content of `key`; reports the first
/// wrong element.
void check_data(const unsigned char* p, size_t count, size_t esize, uint64_t key,
                const std::string& what);
/// Bytes [from, to) of `p` still hold kSentinel.
void check_untouched(const unsigned char* p, size_t from, size_t to, const std::string& what);

/// Deterministic shuffle (the same on every platform and library).
template <class T>
void shuffle(std::vector<T>& v, uint64_t seed) {
  for (size_t i = v.size(); i > 1; --i) {
    seed = mix(seed);
    std::swap(v[i - 1], v[seed % i]);
  }
}

// ---- sizes ----

struct Size {
  const char* label;
  size_t count;
};
/// 0, 1, eager-1, eager (exactly kEagerBytes), eager+1 and big elements.
std::vector<Size> sizes_for(int dtype);
constexpr size_t kSizeCount = 6;
bool is_eager(int dtype, size_t count);
std::string size_text(const char* label, size_t count, int dtype);

// ---- operations ----

/// A message this rank sends.
struct Out {
  std::vector<unsigned char> buf;
  int dtype = 0;
  size_t count = 0;
  int peer = -1;
  int tag = 0;
  chorus_request_t* req = nullptr;
};

Out make_out(int dtype, size_t count, int peer, int tag, uint64_t salt);
std::string send_text(const Out& o);
void isend(Out& o);
void send(Out& o, int want = CHORUS_OK);
/// Waits for and frees an isend's request (nothing without one).
void wait_send(Out& o, int want = CHORUS_OK);

/// A receive this rank posts; its buffer starts filled with kSentinel.
struct In {
  std::vector<unsigned char> buf;
  int dtype = 0;
  size_t capacity = 0;
  int source = CHORUS_ANY_SOURCE;
  int tag = CHORUS_ANY_TAG;
  chorus_request_t* req = nullptr;
  chorus_p2p_status_t st{-7, -7, size_t(-7)};
  bool ok = false;  // completed successfully
};

In make_in(int dtype, size_t capacity, int source, int tag);
std::string recv_text(const In& in);
void irecv(In& in);
/// A failed receive must leave its status untouched.
void recv(In& in, int want = CHORUS_OK);
/// Waits for and frees an irecv's request; reads its status on success.
void wait_recv(In& in, int want = CHORUS_OK);
/// A completed receive got `count` elements from `src` with `tag` and the
/// content of `salt`, and nothing past them was written.
void check_in(const In& in, int src, int tag, size_t count, uint64_t salt);

void barrier();
/// all_reduce (sum of int64) with every element checked.
void checked_all_reduce(size_t count, int salt);
/// Untagged chorus_send/recv around the ring, checked.
void checked_untagged_ring(size_t count, uint64_t salt);

// ---- pairs ----

/// This rank's partner in round `round`: ranks rotated by the round, then
/// paired (0,1), (2,3), ...; with an odd size one rank sits out.
struct Pair {
  int peer = -1;
  bool first = false;  // the lower of the two (the sender of one-way orders)
};
Pair pair_of(int round);

/// One message each way between this rank and `peer`.
struct Step {
  int peer;
  int dtype;
  size_t count;
  int tag;
  uint64_t salt;
  Out out() const { return make_out(dtype, count, peer, tag, salt); }
  In in() const { return make_in(dtype, count, peer, tag); }
  void check(const In& in) const { check_in(in, peer, tag, count, salt); }
};

/// A marker: the sender announces that it is about to block.
Out marker_out(int peer, uint64_t salt);
void take_marker(int peer, uint64_t salt);

// ---- the cases (one file each; tagged_check.cc lists them) ----

void case_orders();                      // tagged_orders.cc
void case_tags();                        // tagged_matching.cc
void case_any();                         // tagged_matching.cc
void case_traffic();                     // tagged_traffic.cc
void case_mismatch();                    // tagged_errors.cc
void case_args();                        // tagged_errors.cc
void case_timeout();                     // tagged_errors.cc
void case_disabled();                    // tagged_errors.cc
void case_threads(Communicator& world);  // tagged_threads.cc
void case_behind();                      // tagged_threads.cc
void case_behind_threads();              // tagged_threads.cc
void case_lazy();                        // tagged_lazy.cc
void case_lazy_timeout();                // tagged_lazy.cc

}  // namespace chorus::p2p_test
