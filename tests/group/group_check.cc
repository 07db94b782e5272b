// Grouped calls and all_reduce fusion (chorus_group_start / chorus_group_end)
// on N >= 2 ranks under chorusrun, with CHORUS_COLLECTIVES_FUSION_BYTES set
// to the limit passed as --fusion-bytes. Every output element of every call
// is checked on every rank against a value computed here from (rank, index,
// salt) for all ranks, never copied from another rank's buffer. How many
// all_reduces the communicator ran is checked against this file's own
// model of the fusion rule (expected_runs), so a group that silently did not
// fuse, or fused across a boundary it must not cross, fails.
//
// Cases:
//   misuse     group_end with no group; a blocking call, chorus_wait and
//              chorus_test inside a group; cancel of a grouped request;
//              nested groups run only at the outermost end
//   sizes      groups of 1, 2, 16 and 33 all_reduces: counts 0, 1, sizes
//              not divisible by the rank count, several dtypes and ops in
//              one group (so runs split), in place and out of place
//   mixed      all_gather, broadcast and a tagged ring exchange between
//              all_reduces of one group
//   two_comms  one group over the world and a split child, interleaved
//   limit      a group of ten all_reduces whose bytes pass the limit
//              several times (several fused calls)
//   bucket     sixteen all_reduces carved end to end from one input and one
//              output block (fused on the blocks, no copy), in place, and
//              with outputs apart (packed)
//   mismatch   (on a child communicator, last) rank 0 groups two
//              all_reduces of 100 and 200 elements, the others of 200 and
//              100: the same total, another composition. Both calls fail
//              with MISMATCH on every rank, within the collective timeout.
#include <chorus/chorus.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

int g_rank = 0, g_size = 1;
uint64_t g_limit = 4u << 20;
long g_failures = 0, g_checks = 0;
std::string g_case;

void fail(const std::string& what) {
  ++g_failures;
  std::printf("rank %d: FAIL [%s] %s\n", g_rank, g_case.c_str(), what.c_str());
}

bool expect_rc(int rc, int want, const std::string& what) {
  ++g_checks;
  if (rc == want) return true;
  fail(what + ": got " + chorus_status_name(rc) + " (" + chorus_last_error() + "), expected " +
       chorus_status_name(want));
  return false;
}

bool expect_ok(int rc, const std::string& what) { return expect_rc(rc, CHORUS_OK, what); }

void expect_text(const std::string& text, const std::string& part, const std::string& what) {
  ++g_checks;
  if (text.find(part) == std::string::npos)
    fail(what + ": message \"" + text + "\" does not say \"" + part + "\"");
}

/// Element access through double: every value here is a small integer,
/// exact in every dtype used.
double get(int dtype, const std::byte* p, size_t i) {
  switch (dtype) {
    case CHORUS_FLOAT32:
      return reinterpret_cast<const float*>(p)[i];
    case CHORUS_FLOAT64:
      return reinterpret_cast<const double*>(p)[i];
    case CHORUS_INT32:
      return reinterpret_cast<const int32_t*>(p)[i];
    case CHORUS_INT64:
      return double(reinterpret_cast<const int64_t*>(p)[i]);
    case CHORUS_UINT8:
      return reinterpret_cast<const uint8_t*>(p)[i];
  }
  return -1;
}

void put(int dtype, std::byte* p, size_t i, double v) {
  switch (dtype) {
    case CHORUS_FLOAT32:
      reinterpret_cast<float*>(p)[i] = float(v);
      break;
    case CHORUS_FLOAT64:
      reinterpret_cast<double*>(p)[i] = v;
      break;
    case CHORUS_INT32:
      reinterpret_cast<int32_t*>(p)[i] = int32_t(v);
      break;
    case CHORUS_INT64:
      reinterpret_cast<int64_t*>(p)[i] = int64_t(v);
      break;
    case CHORUS_UINT8:
      reinterpret_cast<uint8_t*>(p)[i] = uint8_t(v);
      break;
  }
}

/// What rank r contributes at index i: 1..13, or 1..3 for a product (so a
/// product of four ranks stays within uint8).
double value(int r, size_t i, int salt, int op) {
  const auto v = uint64_t(r) * 7 + i * 3 + uint64_t(salt) * 5;
  return op == CHORUS_PROD ? double(v % 3 + 1) : double(v % 13 + 1);
}

/// The reduction over every rank, computed here.
double reduced(size_t i, int salt, int op) {
  double acc = value(0, i, salt, op);
  for (int r = 1; r < g_size; ++r) {
    const double v = value(r, i, salt, op);
    if (op == CHORUS_SUM) acc += v;
    if (op == CHORUS_PROD) acc *= v;
    if (op == CHORUS_MAX) acc = std::max(acc, v);
    if (op == CHORUS_MIN) acc = std::min(acc, v);
  }
  return acc;
}

/// One non-blocking call of a group, with its buffers and its check.
struct Call {
  chorus_comm_t* comm = nullptr;
  std::string what;
  bool all_reduce = false;
  int dtype = CHORUS_FLOAT32, op = CHORUS_SUM;
  size_t count = 0;
  std::vector<std::byte> in, out;
  chorus_request_t* req = nullptr;
  std::function<double(size_t)> want;  // expected out element i
  size_t out_count = 0;
};

size_t esize(int dtype) { return chorus_dtype_size(dtype); }

/// Issues an all_reduce (in place when `in_place`).
void post_all_reduce(Call& c, chorus_comm_t* comm, size_t count, int dtype, int op, bool in_place,
                     int salt) {
  c.comm = comm, c.all_reduce = true, c.dtype = dtype, c.op = op, c.count = count;
  c.what = std::string("all_reduce ") + chorus_dtype_name(dtype) + " " + chorus_op_name(op) + " x" +
           std::to_string(count) + (in_place ? " in place" : "") + " salt " + std::to_string(salt);
  c.out.assign(std::max<size_t>(count, 1) * esize(dtype), std::byte{0xee});
  std::byte* src = c.out.data();
  if (!in_place) {
    c.in.assign(std::max<size_t>(count, 1) * esize(dtype), std::byte{0});
    src = c.in.data();
  }
  for (size_t i = 0; i < count; ++i) put(dtype, src, i, value(g_rank, i, salt, op));
  c.out_count = count;
  c.want = [=](size_t i) { return reduced(i, salt, op); };
  expect_ok(chorus_iall_reduce(comm, in_place ? c.out.data() : c.in.data(), c.out.data(), count,
                               dtype, op, &c.req),
            "issuing " + c.what);
}

void post_all_gather(Call& c, chorus_comm_t* comm, size_t count, int salt) {
  c.comm = comm, c.dtype = CHORUS_INT64, c.count = count;
  c.what = "all_gather int64 x" + std::to_string(count);
  c.in.assign(std::max<size_t>(count, 1) * 8, std::byte{0});
  for (size_t i = 0; i < count; ++i) put(CHORUS_INT64, c.in.data(), i, value(g_rank, i, salt, 0));
  int n = 0;
  chorus_comm_size(comm, &n);
  c.out.assign(std::max<size_t>(count * size_t(n), 1) * 8, std::byte{0xee});
  c.out_count = count * size_t(n);
  c.want = [=](size_t j) { return value(int(j / count), j % count, salt, 0); };
  expect_ok(chorus_iall_gather(comm, c.in.data(), c.out.data(), count, CHORUS_INT64, &c.req),
            "issuing " + c.what);
}

void post_broadcast(Call& c, chorus_comm_t* comm, size_t count, int root, int salt) {
  c.comm = comm, c.dtype = CHORUS_FLOAT64, c.count = count;
  c.what = "broadcast float64 x" + std::to_string(count) + " root " + std::to_string(root);
  c.out.assign(std::max<size_t>(count, 1) * 8, std::byte{0});
  for (size_t i = 0; i < count; ++i)
    put(CHORUS_FLOAT64, c.out.data(), i, g_rank == root ? value(root, i, salt, 0) : -1.0);
  c.out_count = count;
  c.want = [=](size_t i) { return value(root, i, salt, 0); };
  expect_ok(chorus_ibroadcast(comm, c.out.data(), count, CHORUS_FLOAT64, root, &c.req),
            "issuing " + c.what);
}

/// A tagged send to the right neighbour or a receive from the left one.
void post_ring(Call& c, chorus_comm_t* comm, bool send, size_t count, int salt) {
  c.comm = comm, c.dtype = CHORUS_INT32, c.count = count;
  const int right = (g_rank + 1) % g_size, left = (g_rank + g_size - 1) % g_size;
  c.what = std::string(send ? "isend_tagged" : "irecv_tagged") + " x" + std::to_string(count);
  c.out.assign(count * 4, std::byte{0});
  if (send) {
    for (size_t i = 0; i < count; ++i)
      put(CHORUS_INT32, c.out.data(), i, value(g_rank, i, salt, 0));
    expect_ok(chorus_isend_tagged(comm, c.out.data(), count, CHORUS_INT32, right, 9, &c.req),
              "issuing " + c.what);
  } else {
    c.out_count = count;
    c.want = [=](size_t i) { return value(left, i, salt, 0); };
    expect_ok(chorus_irecv_tagged(comm, c.out.data(), count, CHORUS_INT32, left, 9, &c.req),
              "issuing " + c.what);
  }
}

/// Waits for every call and checks every element of every output.
void finish_all(std::vector<Call>& calls) {
  for (Call& c : calls) {
    if (!c.req) continue;
    const bool ok = expect_ok(chorus_wait(c.req, -1), "waiting for " + c.what);
    chorus_request_free(c.req);
    c.req = nullptr;
    if (!ok || !c.want) continue;
    ++g_checks;
    for (size_t i = 0; i < c.out_count; ++i) {
      const double got = get(c.dtype, c.out.data(), i), want = c.want(i);
      if (got != want) {
        fail(c.what + ": element " + std::to_string(i) + " is " + std::to_string(got) +
             ", expected " + std::to_string(want));
        break;
      }
    }
  }
}

/// The all_reduces a communicator has run (every algorithm).
uint64_t all_reduces_run(chorus_comm_t* comm) {
  std::vector<chorus_counter_t> c(1024);
  size_t n = 0;
  if (chorus_comm_counters(comm, c.data(), c.size(), &n) != CHORUS_OK) return 0;
  uint64_t total = 0;
  for (size_t i = 0; i < n && i < c.size(); ++i)
    if (std::strncmp(c[i].name, "ops.all_reduce.", 15) == 0) total += c[i].value;
  return total;
}

/// This test's own statement of the fusion rule: how many all_reduces a
/// communicator runs for `calls` (its calls in issue order).
uint64_t expected_runs(const std::vector<Call>& calls, chorus_comm_t* comm) {
  uint64_t runs = 0, bytes = 0;
  const Call* open = nullptr;  // first call of the fusing run, if any
  for (const Call& c : calls) {
    if (c.comm != comm) continue;
    if (!c.all_reduce) {
      open = nullptr;
      continue;
    }
    const uint64_t b = c.count * esize(c.dtype);
    if (open && open->dtype == c.dtype && open->op == c.op && bytes + b <= g_limit) {
      bytes += b;
      continue;
    }
    ++runs;
    open = g_limit > 0 && b <= g_limit ? &c : nullptr;
    bytes = b;
  }
  return runs;
}

/// Runs `calls` as one group (posted by `post`), waits, checks, and checks
/// the all_reduce count of each communicator in `comms`.
void run_group(std::vector<Call>& calls, const std::function<void()>& post,
               const std::vector<chorus_comm_t*>& comms, const std::string& name) {
  std::vector<uint64_t> before;
  for (auto* c : comms) before.push_back(all_reduces_run(c));
  expect_ok(chorus_group_start(), "group_start " + name);
  post();
  expect_ok(chorus_group_end(), "group_end " + name);
  finish_all(calls);
  for (size_t k = 0; k < comms.size(); ++k) {
    ++g_checks;
    const uint64_t ran = all_reduces_run(comms[k]) - before[k];
    const uint64_t want = expected_runs(calls, comms[k]);
    if (ran != want)
      fail(name + ": communicator " + std::to_string(k) + " ran " + std::to_string(ran) +
           " all_reduces, expected " + std::to_string(want) + " (fusion_bytes " +
           std::to_string(g_limit) + ")");
  }
}

chorus_comm_t* g_world = nullptr;

void case_misuse() {
  expect_rc(chorus_group_end(), CHORUS_ERR_INVALID_ARGUMENT, "group_end without a group");
  expect_text(chorus_last_error(), "chorus_group_start", "group_end without a group");
  std::vector<float> a(8, 1.0f);
  Call c;
  expect_ok(chorus_group_start(), "group_start");
  expect_ok(chorus_group_start(), "nested group_start");
  expect_rc(chorus_all_reduce(g_world, a.data(), a.data(), 8, CHORUS_FLOAT32, CHORUS_SUM),
            CHORUS_ERR_INVALID_ARGUMENT, "blocking all_reduce inside a group");
  expect_text(chorus_last_error(), "chorus_iall_reduce", "blocking all_reduce inside a group");
  expect_rc(chorus_barrier(g_world), CHORUS_ERR_INVALID_ARGUMENT, "blocking barrier in a group");
  post_all_reduce(c, g_world, 5, CHORUS_INT32, CHORUS_SUM, false, 3);
  expect_ok(chorus_group_end(), "inner group_end");
  int done = 0;
  expect_rc(chorus_test(c.req, &done), CHORUS_ERR_INVALID_ARGUMENT, "test after the inner end");
  expect_text(chorus_last_error(), "chorus_group_end", "test after the inner end");
  expect_rc(chorus_wait(c.req, 1000), CHORUS_ERR_INVALID_ARGUMENT, "wait after the inner end");
  expect_rc(chorus_cancel(c.req), CHORUS_ERR_NOT_SUPPORTED, "cancel of a grouped call");
  expect_ok(chorus_group_end(), "outer group_end");
  std::vector<Call> calls;
  calls.push_back(std::move(c));
  finish_all(calls);
}

void case_sizes() {
  static const size_t kCounts[] = {0, 1, 7, 1000, 3, 16384, 2, 100003, 13, 4097, 1};
  static const int kTypes[] = {CHORUS_FLOAT32, CHORUS_INT64, CHORUS_FLOAT64, CHORUS_INT32,
                               CHORUS_UINT8};
  static const int kOps[] = {CHORUS_SUM, CHORUS_MAX, CHORUS_PROD, CHORUS_MIN};
  for (const size_t n : {size_t(1), size_t(2), size_t(16), size_t(33)}) {
    std::vector<Call> calls(n);
    // Stretches of four calls share a dtype and op (they fuse), then both
    // change; in-place and out-of-place alternate within a stretch.
    run_group(
        calls,
        [&] {
          for (size_t k = 0; k < n; ++k) {
            const size_t stretch = k / 4;
            post_all_reduce(calls[k], g_world, kCounts[(k * 5 + n) % 11], kTypes[stretch % 5],
                            kOps[(stretch + n) % 4], k % 2 == 1, int(k + n));
          }
        },
        {g_world}, "group of " + std::to_string(n));
  }
}

void case_mixed() {
  std::vector<Call> calls(9);
  run_group(
      calls,
      [&] {
        post_all_reduce(calls[0], g_world, 333, CHORUS_FLOAT32, CHORUS_SUM, false, 1);
        post_all_reduce(calls[1], g_world, 5, CHORUS_FLOAT32, CHORUS_SUM, true, 2);
        post_all_gather(calls[2], g_world, 11, 3);
        post_all_reduce(calls[3], g_world, 77, CHORUS_FLOAT32, CHORUS_SUM, false, 4);
        post_ring(calls[4], g_world, true, 50, 5);
        post_ring(calls[5], g_world, false, 50, 5);
        post_all_reduce(calls[6], g_world, 0, CHORUS_FLOAT32, CHORUS_SUM, false, 6);
        post_broadcast(calls[7], g_world, 1001, g_size - 1, 7);
        post_all_reduce(calls[8], g_world, 9, CHORUS_INT32, CHORUS_MAX, true, 8);
      },
      {g_world}, "mixed group");
}

void case_two_comms() {
  chorus_comm_t* child = nullptr;
  // Reversed rank order: the child's ranks differ from the world's.
  if (!expect_ok(chorus_comm_split(g_world, 0, g_size - g_rank, &child), "split")) return;
  std::vector<Call> calls(8);
  run_group(
      calls,
      [&] {
        for (size_t k = 0; k < calls.size(); ++k)
          post_all_reduce(calls[k], k % 3 == 1 ? child : g_world, 100 + 37 * k, CHORUS_INT64,
                          CHORUS_SUM, k % 2 == 0, int(k) + 40);
      },
      {g_world, child}, "two communicators");
  expect_ok(chorus_comm_finalize(child), "finalize child");
}

void case_limit() {
  // Each call a third of the limit, plus one element: two fit, a third
  // does not. With no limit, a size that still fills several calls.
  const size_t count = g_limit > 0 ? size_t(g_limit / 3 / 4) + 1 : 4096;
  std::vector<Call> calls(10);
  run_group(
      calls,
      [&] {
        for (size_t k = 0; k < calls.size(); ++k)
          post_all_reduce(calls[k], g_world, count - k, CHORUS_FLOAT32, CHORUS_SUM, k % 2 == 0,
                          int(k) + 60);
      },
      {g_world}, "past the byte limit");
}

void case_bucket() {
  // The calls' buffers carved end to end out of one input block and one
  // output block, as a framework's gradient bucket lays them out: the fused
  // call runs on the blocks themselves (core/api_group.cc). Counts include 0
  // and odd sizes; out of place, then the same bucket in place, then inputs
  // end to end but outputs not (packed). Every element of every call is
  // checked against this file's reference, on every rank.
  const std::vector<size_t> counts = {7, 0, 1, 333, 64, 0, 1000, 5, 2, 129, 0, 17, 256, 3, 90, 11};
  size_t total = 0;
  for (size_t n : counts) total += n;
  const int dtype = CHORUS_FLOAT32, op = CHORUS_SUM;
  for (int layout = 0; layout < 3; ++layout) {
    const bool in_place = layout == 1, packed_out = layout == 2;
    std::vector<float> in(total + 1), out(total + 1, -1.0f);
    // layout 2: each call's output is its own vector (not end to end).
    std::vector<std::vector<float>> own(counts.size());
    std::vector<chorus_request_t*> reqs(counts.size(), nullptr);
    std::vector<float*> outs(counts.size());
    const std::string what = std::string("bucket ") + (in_place     ? "in place"
                                                       : packed_out ? "outputs apart"
                                                                    : "out of place");
    const uint64_t before = all_reduces_run(g_world);
    expect_ok(chorus_group_start(), "group_start " + what);
    size_t at = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
      const int salt = 70 + int(k) + 20 * layout;
      float* src = (in_place ? out.data() : in.data()) + at;
      for (size_t i = 0; i < counts[k]; ++i) src[i] = float(value(g_rank, i, salt, op));
      if (packed_out) {
        own[k].assign(counts[k] + 1, -1.0f);
        outs[k] = own[k].data();
      } else {
        outs[k] = out.data() + at;
      }
      expect_ok(chorus_iall_reduce(g_world, src, outs[k], counts[k], dtype, op, &reqs[k]),
                "issuing " + what + " call " + std::to_string(k));
      at += counts[k];
    }
    expect_ok(chorus_group_end(), "group_end " + what);
    for (size_t k = 0; k < counts.size(); ++k) {
      const bool ok = expect_ok(chorus_wait(reqs[k], -1), "waiting for " + what);
      chorus_request_free(reqs[k]);
      if (!ok) continue;
      ++g_checks;
      const int salt = 70 + int(k) + 20 * layout;
      for (size_t i = 0; i < counts[k]; ++i)
        if (double(outs[k][i]) != reduced(i, salt, op)) {
          fail(what + ": call " + std::to_string(k) + " element " + std::to_string(i) + " is " +
               std::to_string(outs[k][i]) + ", expected " + std::to_string(reduced(i, salt, op)));
          break;
        }
    }
    // Nothing past the bucket was written.
    ++g_checks;
    if (!packed_out && out[total] != -1.0f) fail(what + ": the element after the bucket changed");
    // One fused all_reduce when the bucket fits the limit.
    ++g_checks;
    const uint64_t want = g_limit >= total * sizeof(float) ? 1 : 0;
    const uint64_t ran = all_reduces_run(g_world) - before;
    if (want == 1 && ran != 1)
      fail(what + ": ran " + std::to_string(ran) + " all_reduces, expected 1 fused");
  }
}

void case_mismatch() {
  chorus_comm_t* child = nullptr;
  if (!expect_ok(chorus_comm_split(g_world, 0, g_rank, &child), "split")) return;
  std::vector<int32_t> a(200, 1), b(200, 1);
  const size_t first = g_rank == 0 ? 100 : 200, second = g_rank == 0 ? 200 : 100;
  chorus_request_t* ra = nullptr;
  chorus_request_t* rb = nullptr;
  expect_ok(chorus_group_start(), "group_start");
  expect_ok(chorus_iall_reduce(child, a.data(), a.data(), first, CHORUS_INT32, CHORUS_SUM, &ra),
            "issuing the first call");
  expect_ok(chorus_iall_reduce(child, b.data(), b.data(), second, CHORUS_INT32, CHORUS_SUM, &rb),
            "issuing the second call");
  expect_ok(chorus_group_end(), "group_end");
  for (chorus_request_t* r : {ra, rb}) {
    if (!r) continue;
    const int rc = chorus_wait(r, -1);
    const std::string text = chorus_last_error();
    if (std::getenv("GROUP_CHECK_VERBOSE")) std::printf("rank %d: %s\n", g_rank, text.c_str());
    expect_rc(rc, CHORUS_ERR_MISMATCH, "a group of another composition than rank 0's");
    if (rc == CHORUS_ERR_MISMATCH) {
      // With fusion, the message names the fused calls; without, the
      // grouping rule.
      expect_text(text, g_limit > 0 ? "fused from 2 grouped calls" : "chorus_group_start",
                  "the mismatch error");
    }
    chorus_request_free(r);
  }
  // No rank leaves the child before every rank has its result: a rank that
  // finalized early would make a slower rank's call fail PEER_LOST (rank
  // gone) before that rank read the mismatch notice.
  expect_ok(chorus_barrier(g_world), "barrier on the world after the mismatch");
  chorus_comm_finalize(child);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--fusion-bytes" && i + 1 < argc) {
      g_limit = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--case" && i + 1 < argc) {
      only.push_back(argv[++i]);
    } else {
      std::fprintf(stderr,
                   "usage: group_check --fusion-bytes N (as collectives.fusion_bytes) [--case "
                   "misuse|sizes|mixed|two_comms|limit|mismatch]...\n");
      return 2;
    }
  }
  if (chorus_comm_init(nullptr, &g_world) != CHORUS_OK) {
    std::fprintf(stderr, "init failed: %s\n", chorus_last_error());
    return 1;
  }
  chorus_comm_rank(g_world, &g_rank);
  chorus_comm_size(g_world, &g_size);
  if (g_size < 2) {
    std::fprintf(stderr, "group_check needs at least 2 ranks\n");
    return 2;
  }
  const std::vector<std::pair<std::string, void (*)()>> cases = {
      {"misuse", case_misuse},       {"sizes", case_sizes}, {"mixed", case_mixed},
      {"two_comms", case_two_comms}, {"limit", case_limit}, {"bucket", case_bucket},
      {"mismatch", case_mismatch}};
  for (const auto& [name, body] : cases) {
    if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) continue;
    g_case = name;
    const long before = g_failures;
    body();
    std::printf("rank %d: case %s: %s\n", g_rank, name.c_str(),
                g_failures == before ? "ok" : "FAILED");
  }
  chorus_comm_finalize(g_world);
  std::printf("rank %d: %ld checks, %ld failures\n", g_rank, g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
