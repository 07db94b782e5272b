// Arithmetic limits, overlap and argument errors at the C API (issue #16),
// on 3 ranks through chorusrun; the transport and algorithm come from the
// environment (CHORUS_TRANSPORT, CHORUS_ALGORITHM_*), so ctest runs it over
// tcp and shm with ring and mesh.
//
// The communicator is created with timeout.init = 1e308 and
// timeout.collective = 1e10, beyond what a steady_clock deadline can hold;
// they must mean "no deadline", so a rank that arrives late is waited for
// instead of every wait failing at once.
//
//   limits_check [efault] [default-timeouts]
// With "efault" (tcp only) it ends with rank 0 sending from memory that is
// not mapped: rank 0 must report a local error (CHORUS_ERR_SYSTEM naming the
// bad address), never PEER_LOST; rank 1, whose peer left, reports rank 0.
// Receiving into memory that is not writable (read-only, unmapped) fails as
// a local error on every transport it runs over (tcp and shm check receive
// buffers; the conformance case [bad_buffer] goes further).
#include <chorus/chorus.h>
#include <chorus/chorus.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

int g_failed = 0;
int g_passed = 0;
int g_rank = -1;

void expect(bool ok, const std::string& what) {
  if (!ok) std::printf("rank %d FAIL: %s\n", g_rank, what.c_str());
  ok ? ++g_passed : ++g_failed;
}

/// `rc` must be INVALID_ARGUMENT and the last error must contain `needle`.
void refused(int rc, const std::string& what, const char* needle) {
  const std::string msg = rc == CHORUS_OK ? "" : chorus_last_error();
  expect(rc == CHORUS_ERR_INVALID_ARGUMENT && msg.find(needle) != std::string::npos,
         what + ": expected INVALID_ARGUMENT mentioning '" + needle + "', got " +
             chorus_status_name(rc) + " (" + msg + ")");
}

/// A non-blocking call must be refused at issue, handing back no request.
/// `req` is where the call would have put its request: it must stay NULL.
void refused_issue(int rc, const std::string& what, const char* needle, chorus_request_t*& req) {
  refused(rc, what, needle);
  expect(req == nullptr, what + ": a refused call handed back a request");
  if (req) {
    chorus_wait(req, -1);
    chorus_request_free(req);
  }
  req = nullptr;
}

float value(int rank, size_t i) { return float((rank + 1) * 1000 + int(i % 997)); }

void ok(int rc, const std::string& what) {
  expect(rc == CHORUS_OK,
         what + ": " + chorus_status_name(rc) + " " + (rc == CHORUS_OK ? "" : chorus_last_error()));
}

}  // namespace

int main(int argc, char** argv) {
  bool efault = false, default_timeouts = false;
  for (int i = 1; i < argc; ++i) {
    efault = efault || std::strcmp(argv[i], "efault") == 0;
    // Only to check the other cases against a build without saturating
    // timeouts, whose init would fail at once.
    default_timeouts = default_timeouts || std::strcmp(argv[i], "default-timeouts") == 0;
  }
  const char* settings[] = {"timeout.init = 1e308", "timeout.collective = 1e10"};
  chorus_options_t opts;
  chorus_options_init(&opts);
  opts.settings = settings;
  opts.settings_count = default_timeouts ? 0 : 2;
  chorus_comm_t* comm = nullptr;
  if (int rc = chorus_comm_init(&opts, &comm); rc != CHORUS_OK) {
    std::printf("FAIL: init with timeout.init = 1e308: %s %s\n", chorus_status_name(rc),
                chorus_last_error());
    std::printf("0 passed, 1 failed\n");
    return 1;
  }
  int rank = 0, size = 0;
  chorus_comm_rank(comm, &rank);
  chorus_comm_size(comm, &size);
  g_rank = rank;

  // --- huge timeouts: the last rank arrives late and is waited for --------
  if (rank == size - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  {
    std::vector<float> x(1024, float(rank + 1));
    ok(chorus_all_reduce(comm, x.data(), x.data(), x.size(), CHORUS_FLOAT32, CHORUS_SUM),
       "all_reduce under timeout.collective = 1e10 with a late rank");
    const float want = float(size * (size + 1) / 2);
    size_t wrong = 0;
    for (float v : x) wrong += v != want;
    expect(wrong == 0, "all_reduce under a huge timeout: " + std::to_string(wrong) + " wrong");
  }

  // --- counts whose byte size cannot be represented -----------------------
  // Refused on every rank before any traffic, so no rank waits for another.
  std::vector<uint8_t> small(64);
  void* p = small.data();
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  refused(chorus_send(comm, p, SIZE_MAX, CHORUS_UINT8, right), "send count SIZE_MAX",
          "PTRDIFF_MAX");
  refused(chorus_recv(comm, p, SIZE_MAX, CHORUS_UINT8, left), "recv count SIZE_MAX", "PTRDIFF_MAX");
  refused(chorus_broadcast(comm, p, SIZE_MAX, CHORUS_UINT8, 0), "broadcast count SIZE_MAX",
          "PTRDIFF_MAX");
  refused(chorus_all_reduce(comm, p, p, SIZE_MAX, CHORUS_UINT8, CHORUS_SUM),
          "all_reduce count SIZE_MAX", "PTRDIFF_MAX");
  refused(chorus_all_reduce(comm, p, p, SIZE_MAX / 4, CHORUS_FLOAT32, CHORUS_SUM),
          "all_reduce count SIZE_MAX/4 float32", "PTRDIFF_MAX");
  refused(chorus_all_reduce(comm, p, p, (SIZE_MAX >> 3) + 2, CHORUS_FLOAT64, CHORUS_SUM),
          "all_reduce count x 8 wrapping to 8 bytes", "PTRDIFF_MAX");
  // count x size: the all_gather output and reduce_scatter input offsets.
  const size_t per_rank = SIZE_MAX / size + 1;
  refused(chorus_all_gather(comm, p, p, per_rank, CHORUS_UINT8), "all_gather count x size overflow",
          "PTRDIFF_MAX");
  refused(chorus_reduce_scatter(comm, p, p, per_rank, CHORUS_UINT8, CHORUS_SUM),
          "reduce_scatter count x size overflow", "PTRDIFF_MAX");
  refused(chorus_all_gather(comm, p, p, size_t(PTRDIFF_MAX) / 2, CHORUS_UINT8),
          "all_gather count x size beyond PTRDIFF_MAX", "PTRDIFF_MAX");
  chorus_request_t* req = nullptr;
  refused_issue(chorus_isend(comm, p, SIZE_MAX, CHORUS_UINT8, right, &req), "isend count SIZE_MAX",
                "PTRDIFF_MAX", req);
  req = nullptr;
  refused_issue(chorus_ibroadcast(comm, p, SIZE_MAX, CHORUS_UINT8, 0, &req),
                "ibroadcast count SIZE_MAX", "PTRDIFF_MAX", req);
  // A buffer that runs past the end of the address space.
  void* top = reinterpret_cast<void*>(UINTPTR_MAX - 4095);
  refused(chorus_broadcast(comm, top, 8192, CHORUS_UINT8, 0),
          "broadcast wrapping the address space", "address space");
  refused(chorus_send(comm, top, 1025, CHORUS_FLOAT32, right), "send wrapping the address space",
          "address space");

  // --- partial overlap of input and output --------------------------------
  const size_t n = 1 << 20;
  {
    std::vector<float> buf(3 * n);
    refused(chorus_all_reduce(comm, buf.data(), buf.data() + 1, n, CHORUS_FLOAT32, CHORUS_SUM),
            "all_reduce out = in + 1", "overlap");
    refused(chorus_all_reduce(comm, buf.data() + 1, buf.data(), n, CHORUS_FLOAT32, CHORUS_SUM),
            "all_reduce in = out + 1", "overlap");
    refused(chorus_all_reduce(comm, buf.data(), buf.data() + n - 1, n, CHORUS_FLOAT32, CHORUS_MAX),
            "all_reduce one shared element", "overlap");
    req = nullptr;
    refused_issue(
        chorus_iall_reduce(comm, buf.data(), buf.data() + 1, n, CHORUS_FLOAT32, CHORUS_SUM, &req),
        "iall_reduce out = in + 1", "overlap", req);
    const size_t g = 4096;  // all_gather / reduce_scatter block
    std::vector<float> out(size_t(size) * g + 1);
    refused(
        chorus_all_gather(comm, out.data() + size_t(rank) * g + 1, out.data(), g, CHORUS_FLOAT32),
        "all_gather in = own block + 1", "overlap");
    refused(chorus_all_gather(comm, out.data() + 1, out.data(), g, CHORUS_FLOAT32),
            "all_gather in = out + 1", "overlap");
    refused(chorus_reduce_scatter(comm, out.data(), out.data() + g, g, CHORUS_FLOAT32, CHORUS_SUM),
            "reduce_scatter out inside in", "overlap");
    refused(chorus_reduce_scatter(comm, out.data() + 1, out.data(), g, CHORUS_FLOAT32, CHORUS_SUM),
            "reduce_scatter out = in - 1", "overlap");
    req = nullptr;
    refused_issue(chorus_iall_gather(comm, out.data() + 1, out.data(), g, CHORUS_FLOAT32, &req),
                  "iall_gather in = out + 1", "overlap", req);

    // The documented in-place forms still work, element by element.
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = value(rank, i);
    ok(chorus_all_reduce(comm, x.data(), x.data(), n, CHORUS_FLOAT32, CHORUS_SUM),
       "all_reduce in place");
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) {
      float want = 0;
      for (int r = 0; r < size; ++r) want += value(r, i);
      wrong += x[i] != want;
    }
    expect(wrong == 0, "all_reduce in place: " + std::to_string(wrong) + " wrong elements");
    std::vector<float> all(size_t(size) * g, -1.0f);
    for (size_t i = 0; i < g; ++i) all[size_t(rank) * g + i] = value(rank, i);
    ok(chorus_all_gather(comm, all.data() + size_t(rank) * g, all.data(), g, CHORUS_FLOAT32),
       "all_gather in place");
    wrong = 0;
    for (int r = 0; r < size; ++r)
      for (size_t i = 0; i < g; ++i) wrong += all[size_t(r) * g + i] != value(r, i);
    expect(wrong == 0, "all_gather in place: " + std::to_string(wrong) + " wrong elements");
    // Adjacent, not overlapping: accepted.
    std::vector<float> adj(2 * g);
    for (size_t i = 0; i < g; ++i) adj[i] = value(rank, i);
    ok(chorus_all_reduce(comm, adj.data(), adj.data() + g, g, CHORUS_FLOAT32, CHORUS_SUM),
       "all_reduce with adjacent buffers");
    wrong = 0;
    for (size_t i = 0; i < g; ++i) {
      float want = 0;
      for (int r = 0; r < size; ++r) want += value(r, i);
      wrong += adj[g + i] != want || adj[i] != value(rank, i);
    }
    expect(wrong == 0, "all_reduce with adjacent buffers: " + std::to_string(wrong) + " wrong");
  }

  // --- user mistakes are INVALID_ARGUMENT, never INTERNAL -----------------
  {
    float f[4] = {1, 2, 3, 4};
    float g4[64] = {};
    refused(chorus_all_reduce(nullptr, f, f, 4, CHORUS_FLOAT32, CHORUS_SUM), "NULL comm", "NULL");
    refused(chorus_all_reduce(comm, f, f, 4, 99, CHORUS_SUM), "dtype 99", "dtype");
    refused(chorus_all_reduce(comm, f, f, 4, -1, CHORUS_SUM), "dtype -1", "dtype");
    refused(chorus_all_reduce(comm, f, f, 4, CHORUS_FLOAT32, 17), "op 17", "op");
    refused(chorus_all_reduce(comm, f, f, 2, CHORUS_COMPLEX64, CHORUS_MAX), "complex max",
            "complex");
    refused(chorus_all_reduce(comm, nullptr, f, 4, CHORUS_FLOAT32, CHORUS_SUM), "NULL input",
            "NULL");
    refused(chorus_all_gather(comm, f, nullptr, 1, CHORUS_FLOAT32), "NULL output", "NULL");
    refused(chorus_reduce_scatter(comm, g4, f, 1, CHORUS_FLOAT32, -3), "reduce_scatter op -3",
            "op");
    refused(chorus_broadcast(comm, f, 4, CHORUS_FLOAT32, size), "root = size", "root");
    refused(chorus_broadcast(comm, f, 4, CHORUS_FLOAT32, -1), "root -1", "root");
    refused(chorus_send(comm, f, 4, CHORUS_FLOAT32, rank), "send to self", "peer");
    refused(chorus_recv(comm, f, 4, CHORUS_FLOAT32, size + 3), "recv from rank size+3", "peer");
    refused(chorus_send(comm, f, 4, 1000, right), "send dtype 1000", "dtype");
    refused(chorus_iall_reduce(comm, f, f, 4, CHORUS_FLOAT32, CHORUS_SUM, nullptr), "NULL req_out",
            "NULL");
    refused(chorus_wait(nullptr, 0), "wait NULL", "NULL");
    refused(chorus_test(nullptr, nullptr), "test NULL", "NULL");
    refused(chorus_cancel(nullptr), "cancel NULL", "NULL");
    refused(chorus_comm_rank(nullptr, &rank), "rank of NULL", "NULL");
    refused(chorus_comm_counters(comm, nullptr, 5, nullptr), "counters NULL", "NULL");
    refused(chorus_comm_split(comm, 0, 0, nullptr), "split NULL child_out", "NULL");
    refused(chorus_comm_init(nullptr, nullptr), "init NULL comm_out", "NULL");
    refused(chorus_comm_abort(nullptr), "abort NULL", "NULL");
    int d = 0;
    refused(chorus_dtype_from_name("float33", &d), "dtype name", "float33");
    expect(chorus_comm_algorithm(comm, 99, 8) == nullptr, "algorithm of collective 99 is NULL");
    // Bad options and settings at init.
    chorus_options_t bad;
    chorus_options_init(&bad);
    const char* nan_timeout[] = {"timeout.collective = nan"};
    bad.settings = nan_timeout;
    bad.settings_count = 1;
    chorus_comm_t* c2 = nullptr;
    refused(chorus_comm_init(&bad, &c2), "timeout.collective = nan", "timeout.collective");
    const char* neg_timeout[] = {"timeout.init = -5"};
    bad.settings = neg_timeout;
    refused(chorus_comm_init(&bad, &c2), "timeout.init = -5", "timeout.init");
    bad.settings = nullptr;
    refused(chorus_comm_init(&bad, &c2), "settings NULL with count 1", "NULL");
    bad.settings_count = 0;
    bad.config_path = "/";
    refused(chorus_comm_init(&bad, &c2), "config_path = /", "'/'");
    bad.config_path = "/proc/self/mem";
    refused(chorus_comm_init(&bad, &c2), "config_path = /proc/self/mem", "/proc/self/mem");
    bad.config_path = nullptr;
    bad.struct_size = 3;
    refused(chorus_comm_init(&bad, &c2), "struct_size 3", "struct_size");
  }
  // Every rank is still in step: one more checked collective.
  {
    std::vector<int32_t> x(257, rank + 1);
    ok(chorus_all_reduce(comm, x.data(), x.data(), x.size(), CHORUS_INT32, CHORUS_SUM),
       "all_reduce after the refused calls");
    size_t wrong = 0;
    for (int32_t v : x) wrong += v != size * (size + 1) / 2;
    expect(wrong == 0, "all_reduce after the refused calls: " + std::to_string(wrong) + " wrong");
  }

  // --- the C++ wrapper's chrono timeouts saturate -------------------------
  {
    // Every rank sends to its right neighbour and receives from its left one.
    // Requests of one communicator run in issue order, so even ranks send
    // first and odd ones receive first (no cycle of waiting receives).
    std::vector<int32_t> mine(1000, rank), got(1000, -1);
    chorus_request_t* raw_send = nullptr;
    chorus_request_t* raw_recv = nullptr;
    for (int step = 0; step < 2; ++step) {
      if ((step == 0) == (rank % 2 == 0))
        ok(chorus_isend(comm, mine.data(), mine.size(), CHORUS_INT32, right, &raw_send), "isend");
      else
        ok(chorus_irecv(comm, got.data(), got.size(), CHORUS_INT32, left, &raw_recv), "irecv");
    }
    chorus::Request send_req(raw_send);
    chorus::Request recv_req(raw_recv);
    bool threw_nan = false;
    try {
      send_req.wait_for(std::chrono::duration<double>(std::nan("")));
    } catch (const chorus::Error& e) {
      threw_nan = e.status() == CHORUS_ERR_INVALID_ARGUMENT;
    }
    expect(threw_nan, "Request::wait_for(NaN seconds) throws INVALID_ARGUMENT");
    // A thousand years of hours overflows an int of milliseconds: no limit.
    bool done = false;
    try {
      done = send_req.wait_for(std::chrono::hours(24 * 365 * 1000)) &&
             recv_req.wait_for(std::chrono::duration<double>(1e300));
    } catch (const chorus::Error& e) {
      expect(false, std::string("wait_for with a huge timeout threw: ") + e.what());
    }
    expect(done, "wait_for with a huge timeout waited for completion");
    size_t wrong = 0;
    for (int32_t v : got) wrong += v != left;
    expect(wrong == 0, "isend/irecv ring: " + std::to_string(wrong) + " wrong");
    // A complete request with a sub-millisecond timeout: done, not an error.
    expect(recv_req.wait_for(std::chrono::nanoseconds(1)), "wait_for(1 ns) on a done request");
  }

  // --- a receive into memory that is not writable (issue #16) -------------
  // Rank 1 receives from rank 0 into a read-only page, then into an unmapped
  // one: the receive fails as a local INVALID_ARGUMENT naming the buffer
  // (tcp and shm check receive buffers when they are posted), nothing
  // crashes, rank 0's send completes, and the next message arrives intact.
  if (size >= 2 && rank <= 1) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    for (const bool unmapped : {false, true}) {
      const std::string kind = unmapped ? "an unmapped page" : "a read-only page";
      const std::vector<int32_t> sent(16, 41);
      std::vector<int32_t> next(16, 0);
      void* bad = mmap(nullptr, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      expect(bad != MAP_FAILED, "mmap PROT_READ");
      if (unmapped) munmap(bad, page);
      if (rank == 0) {
        ok(chorus_send(comm, sent.data(), sent.size(), CHORUS_INT32, 1),
           "send to a receive into " + kind);
        ok(chorus_send(comm, sent.data(), sent.size(), CHORUS_INT32, 1),
           "send after a receive into " + kind);
      } else {
        const int rc = chorus_recv(comm, bad, sent.size(), CHORUS_INT32, 0);
        const std::string msg = rc == CHORUS_OK ? "" : chorus_last_error();
        expect((rc == CHORUS_ERR_INVALID_ARGUMENT || rc == CHORUS_ERR_SYSTEM) &&
                   msg.find("not writable memory") != std::string::npos,
               "recv into " + kind + ": expected a local error naming the buffer, got " +
                   std::string(chorus_status_name(rc)) + " (" + msg + ")");
        ok(chorus_recv(comm, next.data(), next.size(), CHORUS_INT32, 0),
           "recv after a receive into " + kind);
        expect(next == sent, "the message after a receive into " + kind + " arrived intact");
        // Rank 0 sent two: the failed receive took neither, so both are
        // still there, in order (a message left behind would be taken by a
        // later receive of another size).
        std::fill(next.begin(), next.end(), 0);
        ok(chorus_recv(comm, next.data(), next.size(), CHORUS_INT32, 0),
           "second recv after a receive into " + kind);
        expect(next == sent, "the second message after a receive into " + kind + " arrived intact");
      }
      if (!unmapped && bad != MAP_FAILED) munmap(bad, page);
    }
  }

  // --- local failures are local (tcp) -------------------------------------
  if (efault && size >= 3) {
    // 1 MiB of address space with no access: the kernel answers EFAULT when
    // the transport reads from it with sendmsg.
    const size_t bytes = 1 << 20;
    void* bad = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    expect(bad != MAP_FAILED, "mmap PROT_NONE");
    std::vector<uint8_t> good(bytes, 7);
    int rc = CHORUS_OK;
    std::string msg;
    if (rank == 0) {  // sends from unmapped memory to rank 1
      rc = chorus_send(comm, bad, bytes, CHORUS_UINT8, 1);
      msg = rc == CHORUS_OK ? "" : chorus_last_error();
      expect(rc == CHORUS_ERR_SYSTEM && msg.find("Bad address") != std::string::npos &&
                 msg.find("local") != std::string::npos,
             "send from unmapped memory: expected a local CHORUS_ERR_SYSTEM naming the bad "
             "address, got " +
                 std::string(chorus_status_name(rc)) + " (" + msg + ")");
    } else if (rank == 1) {
      // Rank 0 failed and closed its connection: rank 1 reports rank 0 as
      // the rank it lost, which is the truth, and nothing worse.
      rc = chorus_recv(comm, good.data(), bytes, CHORUS_UINT8, 0);
      msg = rc == CHORUS_OK ? "" : chorus_last_error();
      expect(rc == CHORUS_ERR_PEER_LOST && msg.find("rank 0") != std::string::npos,
             "recv from the rank whose send failed: expected PEER_LOST naming rank 0, got " +
                 std::string(chorus_status_name(rc)) + " (" + msg + ")");
    }
    if (bad != MAP_FAILED) munmap(bad, bytes);
  }

  // Every rank's point-to-point traffic is received before any rank
  // finalizes: finalize waits for its peers only briefly (docs/embedding.md),
  // and a rank far behind on a loaded machine would find its sender gone.
  // (After the local-error case the communicator is broken, as it must be.)
  if (!efault) {
    ok(chorus_barrier(comm), "barrier before finalize");
    // A request freed twice, or waited on after its free, is an argument
    // error, not a double free (every rank issues the barrier: it matches).
    chorus_request_t* req = nullptr;
    ok(chorus_ibarrier(comm, &req), "ibarrier");
    ok(chorus_wait(req, 60000), "wait for the ibarrier");
    ok(chorus_request_free(req), "request_free");
    refused(chorus_request_free(req), "request_free twice", "already freed");
    refused(chorus_wait(req, 0), "wait on a freed request", "not a live request");
    int done = 0;
    refused(chorus_test(req, &done), "test on a freed request", "not a live request");
  }
  int rc = chorus_comm_finalize(comm);
  expect(rc == CHORUS_OK, "finalize");
  refused(chorus_comm_finalize(comm), "finalize twice", "already finalized");
  // A finalized handle is refused by every call, before anything reads it.
  std::vector<float> after(4, 1.0f);
  refused(
      chorus_all_reduce(comm, after.data(), after.data(), after.size(), CHORUS_FLOAT32, CHORUS_SUM),
      "all_reduce on a finalized communicator", "not a live communicator");
  chorus_request_t* late = nullptr;
  refused_issue(chorus_iall_reduce(comm, after.data(), after.data(), after.size(), CHORUS_FLOAT32,
                                   CHORUS_SUM, &late),
                "iall_reduce on a finalized communicator", "not a live communicator", late);
  // all_to_allv copies its count arrays before queueing: that, too, must not
  // read the finalized communicator.
  const std::vector<size_t> counts(64, 1), offsets(64, 0);
  refused_issue(chorus_iall_to_allv(comm, after.data(), counts.data(), offsets.data(), after.data(),
                                    counts.data(), offsets.data(), CHORUS_FLOAT32, &late),
                "iall_to_allv on a finalized communicator", "not a live communicator", late);
  int r_after = -1;
  refused(chorus_comm_rank(comm, &r_after), "comm_rank on a finalized communicator",
          "not a live communicator");
  expect(chorus_comm_transport(comm) == nullptr,
         "comm_transport of a finalized communicator is NULL");
  std::printf("rank %d: %d passed, %d failed\n", rank, g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
