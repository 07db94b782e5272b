// Multi-process correctness check, run through chorusrun: every collective
// over every dtype and op at awkward counts, each rank checking every element
// of its own result against the exact reference. Also checks that misuse is
// refused with a clear error and leaves the communicator usable.
//
// Usage: chorusrun -n N collective_check [-a ALGORITHM] [--counts 0,1,7,...]
//                                         [--big [--big-every K --big-offset J]]
//                                         [--every N --offset M]
// --big adds the 4 Mi + 3 element count; --big-every/--big-offset choose which
// (dtype, op) combinations run at that count (index % K == J; default all),
// so a full matrix fits its time by choosing where the large count runs.
#include <chorus/chorus.h>

#include "tools/bench/bench_data.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

namespace {

int g_rank = 0;
int g_size = 1;
int g_passed = 0;
int g_failed = 0;
// Deterministic sampling of the (dtype, op) cross product: a combination with
// index i runs when i % every == offset.
struct Sample {
  int every = 1;
  int offset = 0;
};
Sample g_sample;  // the sample of the count being run
int g_combo = 0;

bool sampled() { return g_combo++ % g_sample.every == g_sample.offset; }

void report(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::fprintf(stderr, "FAIL rank %d: %s\n", g_rank, what.c_str());
  }
}

bool valid_pair(int dtype, int op) {
  return !(dtype == CHORUS_COMPLEX64 && (op == CHORUS_MAX || op == CHORUS_MIN));
}

std::string name(const char* coll, int dtype, int op, size_t count) {
  std::ostringstream os;
  os << coll << " " << chorus_dtype_name(dtype);
  if (op >= 0) os << " " << chorus_op_name(op);
  os << " count=" << count;
  return os.str();
}

void check_result(const std::string& what, int rc, int dtype, const std::vector<std::byte>& got,
                  const std::vector<std::byte>& expect) {
  if (rc != CHORUS_OK) {
    report(false, what + ": " + chorus_status_name(rc) + ": " + chorus_last_error());
    return;
  }
  size_t es = chorus_dtype_size(dtype);
  uint64_t wrong = chorus::bench::count_wrong(dtype, got.data(), expect.data(), expect.size() / es);
  report(wrong == 0, what + ": " + std::to_string(wrong) + " wrong elements");
}

void run_reductions(chorus_comm_t* comm, size_t count) {
  for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; ++dtype) {
    size_t es = chorus_dtype_size(dtype);
    for (int op = 0; op < CHORUS_OP_COUNT; ++op) {
      if (!valid_pair(dtype, op)) continue;
      if (!sampled()) continue;
      // all_reduce, out of place and in place
      std::vector<std::byte> in(count * es + 1), out(count * es + 1, std::byte{0x5A}), expect;
      chorus::bench::fill_input(CHORUS_COLL_ALL_REDUCE, dtype, op, g_rank, g_size, in.data(), count,
                                count);
      chorus::bench::expected_output(CHORUS_COLL_ALL_REDUCE, false, dtype, op, g_rank, g_size, 0,
                                     count, expect);
      int rc = chorus_all_reduce(comm, in.data(), out.data(), count, dtype, op);
      out.resize(count * es);
      check_result(name("all_reduce", dtype, op, count), rc, dtype, out, expect);
      rc = chorus_all_reduce(comm, in.data(), in.data(), count, dtype, op);
      in.resize(count * es);
      check_result(name("all_reduce in-place", dtype, op, count), rc, dtype, in, expect);

      // reduce_scatter: count per rank
      std::vector<std::byte> rs_in(count * es * size_t(g_size) + 1), rs_out(count * es + 1);
      chorus::bench::fill_input(CHORUS_COLL_REDUCE_SCATTER, dtype, op, g_rank, g_size, rs_in.data(),
                                count * size_t(g_size), count);
      chorus::bench::expected_output(CHORUS_COLL_REDUCE_SCATTER, false, dtype, op, g_rank, g_size,
                                     0, count, expect);
      rc = chorus_reduce_scatter(comm, rs_in.data(), rs_out.data(), count, dtype, op);
      rs_out.resize(count * es);
      check_result(name("reduce_scatter", dtype, op, count), rc, dtype, rs_out, expect);
    }
  }
}

void run_movement(chorus_comm_t* comm, size_t count) {
  for (int dtype = 0; dtype < CHORUS_DTYPE_COUNT; ++dtype) {
    if (!sampled()) continue;
    size_t es = chorus_dtype_size(dtype);
    std::vector<std::byte> in(count * es + 1), out(count * es * size_t(g_size) + 1), expect;
    chorus::bench::fill_input(CHORUS_COLL_ALL_GATHER, dtype, -1, g_rank, g_size, in.data(), count,
                              count);
    chorus::bench::expected_output(CHORUS_COLL_ALL_GATHER, false, dtype, -1, g_rank, g_size, 0,
                                   count, expect);
    int rc = chorus_all_gather(comm, in.data(), out.data(), count, dtype);
    out.resize(count * es * size_t(g_size));
    check_result(name("all_gather", dtype, -1, count), rc, dtype, out, expect);
    // in place: the input is this rank's block of the output
    // (one spare byte, as above, so that count 0 still has a buffer)
    std::vector<std::byte> ip(count * es * size_t(g_size) + 1, std::byte{0x5A});
    std::memcpy(ip.data() + size_t(g_rank) * count * es, in.data(), count * es);
    rc = chorus_all_gather(comm, ip.data() + size_t(g_rank) * count * es, ip.data(), count, dtype);
    ip.resize(count * es * size_t(g_size));
    check_result(name("all_gather in-place", dtype, -1, count), rc, dtype, ip, expect);

    for (int root : {0, g_size - 1}) {
      std::vector<std::byte> buf(count * es + 1, std::byte{0x33});
      chorus::bench::fill_input(CHORUS_COLL_BROADCAST, dtype, -1, g_rank, g_size, buf.data(), count,
                                count);
      if (g_rank != root) std::fill(buf.begin(), buf.end(), std::byte{0x33});
      chorus::bench::expected_output(CHORUS_COLL_BROADCAST, false, dtype, -1, g_rank, g_size, root,
                                     count, expect);
      rc = chorus_broadcast(comm, buf.data(), count, dtype, root);
      buf.resize(count * es);
      check_result(name(("broadcast root=" + std::to_string(root)).c_str(), dtype, -1, count), rc,
                   dtype, buf, expect);
    }
  }
  if (g_size > 1) {
    // send/recv around the ring, float32
    std::vector<std::byte> in(count * 4 + 1), out(count * 4 + 1), expect;
    chorus::bench::fill_input(-1, CHORUS_FLOAT32, -1, g_rank, g_size, in.data(), count, count);
    chorus::bench::expected_output(-1, true, CHORUS_FLOAT32, -1, g_rank, g_size, 0, count, expect);
    int right = (g_rank + 1) % g_size, left = (g_rank - 1 + g_size) % g_size;
    int rc;
    if (g_rank % 2 == 0) {
      rc = chorus_send(comm, in.data(), count, CHORUS_FLOAT32, right);
      if (rc == CHORUS_OK) rc = chorus_recv(comm, out.data(), count, CHORUS_FLOAT32, left);
    } else {
      rc = chorus_recv(comm, out.data(), count, CHORUS_FLOAT32, left);
      if (rc == CHORUS_OK) rc = chorus_send(comm, in.data(), count, CHORUS_FLOAT32, right);
    }
    out.resize(count * 4);
    check_result(name("send/recv", CHORUS_FLOAT32, -1, count), rc, CHORUS_FLOAT32, out, expect);
  }
}

void run_misuse(chorus_comm_t* comm) {
  float x[4] = {1, 2, 3, 4};
  int rc = chorus_all_reduce(comm, x, x, 4, 99, CHORUS_SUM);
  report(rc == CHORUS_ERR_INVALID_ARGUMENT && std::strstr(chorus_last_error(), "unknown dtype 99"),
         std::string("unknown dtype refused: ") + chorus_last_error());
  rc = chorus_all_reduce(comm, x, x, 4, CHORUS_FLOAT32, 17);
  report(rc == CHORUS_ERR_INVALID_ARGUMENT,
         std::string("unknown op refused: ") + chorus_last_error());
  rc = chorus_all_reduce(comm, x, x, 2, CHORUS_COMPLEX64, CHORUS_MAX);
  report(rc == CHORUS_ERR_INVALID_ARGUMENT && std::strstr(chorus_last_error(), "complex64"),
         std::string("max on complex refused: ") + chorus_last_error());
  rc = chorus_all_reduce(comm, nullptr, x, 4, CHORUS_FLOAT32, CHORUS_SUM);
  report(rc == CHORUS_ERR_INVALID_ARGUMENT && std::strstr(chorus_last_error(), "NULL"),
         std::string("NULL input refused: ") + chorus_last_error());
  rc = chorus_all_reduce(comm, x, x, SIZE_MAX / 2, CHORUS_FLOAT64, CHORUS_SUM);
  report(rc == CHORUS_ERR_INVALID_ARGUMENT && std::strstr(chorus_last_error(), "overflows"),
         std::string("count overflow refused: ") + chorus_last_error());
  rc = chorus_broadcast(comm, x, 4, CHORUS_FLOAT32, g_size);
  report(rc == CHORUS_ERR_INVALID_ARGUMENT,
         std::string("bad root refused: ") + chorus_last_error());
  rc = chorus_send(comm, x, 4, CHORUS_FLOAT32, g_rank);
  report(rc == CHORUS_ERR_INVALID_ARGUMENT,
         std::string("send to self refused: ") + chorus_last_error());
  // The communicator still works after refused calls (nothing was sent).
  float y[3] = {1.0f, float(g_rank), 2.0f};
  rc = chorus_all_reduce(comm, y, y, 3, CHORUS_FLOAT32, CHORUS_SUM);
  report(rc == CHORUS_OK && y[0] == float(g_size) && y[1] == float(g_size * (g_size - 1) / 2) &&
             y[2] == 2.0f * float(g_size),
         "all_reduce after refused calls");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> counts;
  bool big = false;
  Sample small, large;
  std::string algorithm;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--big")
      big = true;
    else if (a == "-a" && i + 1 < argc)
      algorithm = argv[++i];
    else if (a == "--every" && i + 1 < argc)
      small.every = std::max(1, std::atoi(argv[++i]));
    else if (a == "--offset" && i + 1 < argc)
      small.offset = std::atoi(argv[++i]);
    else if (a == "--big-every" && i + 1 < argc)
      large.every = std::max(1, std::atoi(argv[++i]));
    else if (a == "--big-offset" && i + 1 < argc)
      large.offset = std::atoi(argv[++i]);
    else if (a == "--counts" && i + 1 < argc) {
      std::stringstream ss(argv[++i]);
      std::string item;
      while (std::getline(ss, item, ',')) counts.push_back(std::stoull(item));
    } else {
      std::fprintf(stderr,
                   "usage: collective_check [-a ALGORITHM] [--counts a,b,c] "
                   "[--big [--big-every K --big-offset J]] [--every N --offset M]\n");
      return 2;
    }
  }
  small.offset %= small.every;
  large.offset %= large.every;
  std::vector<std::string> settings;
  if (!algorithm.empty())
    for (const char* coll : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier"})
      settings.push_back(std::string("algorithm.") + coll + "=\"" + algorithm + "\"");
  std::vector<const char*> settings_c;
  for (const auto& s : settings) settings_c.push_back(s.c_str());
  chorus_options_t opts;
  chorus_options_init(&opts);
  opts.settings = settings_c.data();
  opts.settings_count = settings_c.size();
  chorus_comm_t* comm = nullptr;
  if (int rc = chorus_comm_init(&opts, &comm); rc != CHORUS_OK) {
    std::fprintf(stderr, "init failed: %s: %s\n", chorus_status_name(rc), chorus_last_error());
    return 1;
  }
  chorus_comm_rank(comm, &g_rank);
  chorus_comm_size(comm, &g_size);
  constexpr size_t kBigCount = (4u << 20) + 3;
  if (counts.empty()) {
    size_t n = size_t(g_size);
    counts = {0, 1, n > 1 ? n - 1 : 2, n + 1, 1000, 99991};
    if (big) counts.push_back(kBigCount);
  }
  for (size_t count : counts) {
    g_combo = 0;  // the same sample at every count
    g_sample = big && count == kBigCount ? large : small;
    run_reductions(comm, count);
    run_movement(comm, count);
  }
  int rc = chorus_barrier(comm);
  report(rc == CHORUS_OK, "final barrier");
  run_misuse(comm);
  // The algorithms that actually ran, from the ops.<collective>.<algorithm>
  // counters: a pin from -a, the environment or a file all show here.
  std::string ran;
  {
    size_t n = 0;
    chorus_comm_counters(comm, nullptr, 0, &n);
    std::vector<chorus_counter_t> c(n);
    chorus_comm_counters(comm, c.data(), c.size(), &n);
    for (size_t i = 0; i < n && i < c.size(); ++i) {
      std::string name = c[i].name;
      if (c[i].value == 0 || name.rfind("ops.", 0) != 0) continue;
      auto dot = name.find('.', 4);
      if (dot == std::string::npos) continue;  // ops.send, ops.inline, ...
      ran += (ran.empty() ? "" : ", ") + name.substr(4, dot - 4) + "=" + name.substr(dot + 1);
    }
  }
  chorus_comm_finalize(comm);
  std::printf(
      "collective_check rank %d of %d (algorithms run: %s; sample %d/%d): %d passed, %d "
      "failed\n",
      g_rank, g_size, ran.empty() ? "none" : ran.c_str(), small.offset, small.every, g_passed,
      g_failed);
  return g_failed == 0 ? 0 : 1;
}
