// The shared part of tagged_check (tagged_harness.h).
#include "tagged_harness.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace chorus::p2p_test {

chorus_comm_t* g_comm = nullptr;
int g_rank = 0;
int g_size = 1;
CaseResult g_case;
std::string g_step;
std::vector<std::string> g_failed_cases;

// ---- results ----

void fail(const std::string& what) {
  ++g_case.failures;
  if (g_case.failures <= kMaxReportedPerCase)
    std::printf("rank %d FAIL case %s: %s: %s\n", g_rank, g_case.name.c_str(), g_step.c_str(),
                what.c_str());
  if (g_case.failures == kMaxReportedPerCase + 1)
    std::printf("rank %d case %s: further failures not printed\n", g_rank, g_case.name.c_str());
  std::fflush(stdout);
}

void expect(bool ok, const std::string& what) {
  ++g_case.checks;
  if (!ok) fail(what);
}

std::string rc_text(int rc) {
  std::string s = chorus_status_name(rc);
  if (rc != CHORUS_OK) s += std::string(" (") + chorus_last_error() + ")";
  return s;
}

bool expect_rc(int rc, int want, const std::string& what) {
  ++g_case.checks;
  if (rc == want) return true;
  fail(what + " returned " + rc_text(rc) + ", expected " + chorus_status_name(want));
  return false;
}

void run_case(const std::string& name, const std::function<void()>& body) {
  g_case = CaseResult{name};
  g_step = "start";
  body();
  if (g_case.failures == 0) {
    std::printf("rank %d case %-9s ok (%ld checks)\n", g_rank, name.c_str(), g_case.checks);
  } else {
    std::printf("rank %d case %-9s FAILED (%ld of %ld checks)\n", g_rank, name.c_str(),
                g_case.failures, g_case.checks);
    g_failed_cases.push_back(name);
  }
  std::fflush(stdout);
}

// ---- data ----

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t key_of(int src, int dst, int tag, uint64_t salt) {
  return mix(mix(mix(uint64_t(src) << 32 | uint32_t(dst)) ^ uint64_t(uint32_t(tag))) ^ salt);
}

namespace {

uint64_t word_at(uint64_t key, size_t w) {
  return mix(key ^ (uint64_t(w) * 0xd6e8feb86659fd93ull));
}

std::string hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s = "0x";
  for (size_t i = n; i-- > 0;) s += {d[p[i] >> 4], d[p[i] & 15]};
  return s;
}

}  // namespace

void fill(unsigned char* p, size_t bytes, uint64_t key) {
  for (size_t off = 0; off < bytes; off += 8) {
    const uint64_t v = word_at(key, off / 8);
    std::memcpy(p + off, &v, std::min<size_t>(8, bytes - off));
  }
}

void check_data(const unsigned char* p, size_t count, size_t esize, uint64_t key,
                const std::string& what) {
  ++g_case.checks;
  const size_t bytes = count * esize;
  unsigned char want[8];
  for (size_t off = 0; off < bytes; off += 8) {
    const uint64_t v = word_at(key, off / 8);
    const size_t n = std::min<size_t>(8, bytes - off);
    std::memcpy(want, &v, n);
    if (std::memcmp(p + off, want, n) == 0) continue;
    size_t b = off;
    while (p[b] == want[b - off]) ++b;
    const size_t i = b / esize;
    unsigned char expected[8];
    for (size_t k = 0; k < esize; ++k) {
      const size_t at = i * esize + k;
      const uint64_t w = word_at(key, at / 8);
      expected[k] = static_cast<unsigned char>(w >> (8 * (at % 8)));
    }
    fail(what + ": first wrong element " + std::to_string(i) + " of " + std::to_string(count) +
         ": got " + hex(p + i * esize, esize) + ", expected " + hex(expected, esize));
    return;
  }
}

void check_untouched(const unsigned char* p, size_t from, size_t to, const std::string& what) {
  ++g_case.checks;
  for (size_t b = from; b < to; ++b)
    if (p[b] != kSentinel) {
      fail(what + ": byte " + std::to_string(b) + " past the message (" + std::to_string(from) +
           " bytes) was written");
      return;
    }
}

// ---- sizes ----

std::vector<Size> sizes_for(int dtype) {
  const size_t e = chorus_dtype_size(dtype);
  const size_t at = kEagerBytes / e;
  return {{"0", 0},
          {"1", 1},
          {"eager-1", at - 1},
          {"eager", at},
          {"eager+1", at + 1},
          {"big", kBigBytes / e + 3}};
}

bool is_eager(int dtype, size_t count) { return count * chorus_dtype_size(dtype) <= kEagerBytes; }

std::string size_text(const char* label, size_t count, int dtype) {
  return std::string(label) + " (" + std::to_string(count) + " x " + chorus_dtype_name(dtype) +
         " = " + std::to_string(count * chorus_dtype_size(dtype)) + " bytes)";
}

// ---- operations ----

Out make_out(int dtype, size_t count, int peer, int tag, uint64_t salt) {
  Out o;
  o.buf.resize(count * chorus_dtype_size(dtype));
  fill(o.buf.data(), o.buf.size(), key_of(g_rank, peer, tag, salt));
  o.dtype = dtype, o.count = count, o.peer = peer, o.tag = tag;
  return o;
}

std::string send_text(const Out& o) {
  return "send_tagged to rank " + std::to_string(o.peer) + " tag " + std::to_string(o.tag) + ", " +
         std::to_string(o.count) + " x " + chorus_dtype_name(o.dtype);
}

void isend(Out& o) {
  expect_rc(chorus_isend_tagged(g_comm, o.buf.data(), o.count, o.dtype, o.peer, o.tag, &o.req),
            CHORUS_OK, "i" + send_text(o));
}

void send(Out& o, int want) {
  expect_rc(chorus_send_tagged(g_comm, o.buf.data(), o.count, o.dtype, o.peer, o.tag), want,
            send_text(o));
}

void wait_send(Out& o, int want) {
  if (!o.req) return;
  expect_rc(chorus_wait(o.req, -1), want, "wait for i" + send_text(o));
  chorus_request_free(o.req);
  o.req = nullptr;
}

In make_in(int dtype, size_t capacity, int source, int tag) {
  In in;
  in.buf.assign(capacity * chorus_dtype_size(dtype), kSentinel);
  in.dtype = dtype, in.capacity = capacity, in.source = source, in.tag = tag;
  return in;
}

std::string recv_text(const In& in) {
  return "recv_tagged from " +
         (in.source == CHORUS_ANY_SOURCE ? std::string("any source")
                                         : "rank " + std::to_string(in.source)) +
         (in.tag == CHORUS_ANY_TAG ? std::string(" any tag") : " tag " + std::to_string(in.tag)) +
         ", room for " + std::to_string(in.capacity) + " x " + chorus_dtype_name(in.dtype);
}

void irecv(In& in) {
  expect_rc(
      chorus_irecv_tagged(g_comm, in.buf.data(), in.capacity, in.dtype, in.source, in.tag, &in.req),
      CHORUS_OK, "i" + recv_text(in));
}

void recv(In& in, int want) {
  chorus_p2p_status_t st{-7, -7, size_t(-7)};
  const int rc =
      chorus_recv_tagged(g_comm, in.buf.data(), in.capacity, in.dtype, in.source, in.tag, &st);
  in.ok = expect_rc(rc, want, recv_text(in)) && rc == CHORUS_OK;
  if (in.ok)
    in.st = st;
  else if (rc != CHORUS_OK)
    expect(st.source == -7 && st.tag == -7 && st.count == size_t(-7),
           recv_text(in) + " failed but wrote its status");
}

void wait_recv(In& in, int want) {
  if (!in.req) return;
  const int rc = chorus_wait(in.req, -1);
  in.ok = expect_rc(rc, want, "wait for i" + recv_text(in)) && rc == CHORUS_OK;
  if (in.ok)
    expect_rc(chorus_request_p2p_status(in.req, &in.st), CHORUS_OK,
              "chorus_request_p2p_status of i" + recv_text(in));
  else if (rc != CHORUS_OK) {
    chorus_p2p_status_t st{};
    expect(chorus_request_p2p_status(in.req, &st) != CHORUS_OK,
           "chorus_request_p2p_status of a failed receive must fail");
  }
  chorus_request_free(in.req);
  in.req = nullptr;
}

void check_in(const In& in, int src, int tag, size_t count, uint64_t salt) {
  const std::string what = recv_text(in) + " (message from rank " + std::to_string(src) + " tag " +
                           std::to_string(tag) + ", " + std::to_string(count) + " elements)";
  if (!in.ok) return;  // its failure is already reported
  expect(in.st.source == src, what + ": status.source " + std::to_string(in.st.source));
  expect(in.st.tag == tag, what + ": status.tag " + std::to_string(in.st.tag));
  expect(in.st.count == count, what + ": status.count " + std::to_string(in.st.count));
  const size_t esize = chorus_dtype_size(in.dtype);
  check_data(in.buf.data(), std::min(count, in.capacity), esize, key_of(src, g_rank, tag, salt),
             what);
  check_untouched(in.buf.data(), std::min(count, in.capacity) * esize, in.buf.size(), what);
}

void barrier() { expect_rc(chorus_barrier(g_comm), CHORUS_OK, "barrier"); }

// ---- pairs ----

Pair pair_of(int round) {
  const int n = g_size;
  const int v = ((g_rank - round) % n + n) % n;
  const int pv = v ^ 1;
  if (pv >= n) return {};
  return {(pv + round) % n, v < pv};
}

Out marker_out(int peer, uint64_t salt) {
  return make_out(CHORUS_INT32, 3, peer, kMarkerTag, salt);
}
void take_marker(int peer, uint64_t salt) {
  In m = make_in(CHORUS_INT32, 3, peer, kMarkerTag);
  recv(m);
  check_in(m, peer, kMarkerTag, 3, salt);
}

void checked_all_reduce(size_t count, int salt) {
  std::vector<int64_t> in(count), out(count, -1);
  for (size_t i = 0; i < count; ++i) in[i] = int64_t(g_rank) * 1000003 + int64_t(i) * 7 + salt;
  if (!expect_rc(chorus_all_reduce(g_comm, in.data(), out.data(), count, CHORUS_INT64, CHORUS_SUM),
                 CHORUS_OK, "all_reduce of " + std::to_string(count) + " int64"))
    return;
  const int64_t ranks = int64_t(g_size) * (g_size - 1) / 2;
  ++g_case.checks;
  for (size_t i = 0; i < count; ++i) {
    const int64_t want = ranks * 1000003 + int64_t(g_size) * (int64_t(i) * 7 + salt);
    if (out[i] != want) {
      fail("all_reduce of " + std::to_string(count) + " int64: first wrong element " +
           std::to_string(i) + ": got " + std::to_string(out[i]) + ", expected " +
           std::to_string(want));
      return;
    }
  }
}

// Even ranks send first, so that no cycle of blocking sends forms.
void checked_untagged_ring(size_t count, uint64_t salt) {
  const int next = (g_rank + 1) % g_size, prev = (g_rank + g_size - 1) % g_size;
  std::vector<unsigned char> out(count * 4), in(count * 4, kSentinel);
  fill(out.data(), out.size(), key_of(g_rank, next, -1, salt));
  auto do_send = [&] {
    expect_rc(chorus_send(g_comm, out.data(), count, CHORUS_INT32, next), CHORUS_OK,
              "untagged send to rank " + std::to_string(next));
  };
  auto do_recv = [&] {
    if (expect_rc(chorus_recv(g_comm, in.data(), count, CHORUS_INT32, prev), CHORUS_OK,
                  "untagged recv from rank " + std::to_string(prev)))
      check_data(in.data(), count, 4, key_of(prev, g_rank, -1, salt),
                 "untagged recv from rank " + std::to_string(prev));
  };
  if (g_rank % 2 == 0)
    do_send(), do_recv();
  else
    do_recv(), do_send();
}

}  // namespace chorus::p2p_test
