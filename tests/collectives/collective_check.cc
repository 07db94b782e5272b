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
// --new-every/--new-offset do the same for reduce, gather, scatter,
// all_to_all and all_to_allv at the other counts (index % K == J among the
// sampled combinations); at the large count they run for the first sampled
// reduction and the first sampled dtype only.
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
// reduce, gather, scatter and all_to_all(v) run for the sampled combinations
// whose index also matches this (--new-every/--new-offset), so a matrix can
// rotate them over its rank counts; at the large count only for the first
// sampled reduction and the first sampled dtype.
Sample g_new;
bool g_big = false;
bool g_big_new_reduction = false, g_big_new_movement = false;

bool sampled() { return g_combo++ % g_sample.every == g_sample.offset; }

/// Whether the combination sampled last also runs the newer collectives.
bool new_sampled(bool& big_done) {
  if (g_big) {
    if (big_done) return false;
    big_done = true;
    return true;
  }
  return (g_combo - 1) % g_new.every == g_new.offset;
}

/// The roots rooted collectives are checked at: the first and last rank and
/// one in the middle, rotated over the sampled combinations (each call site
/// takes its own rotation, so each root meets both the in-place and the
/// out-of-place form).
int root_at(int i) {
  const int roots[3] = {0, g_size - 1, g_size / 2};
  return roots[((i % 3) + 3) % 3];
}

/// Per-rank block of the block collectives (gather, scatter, all_to_all(v)):
/// the count itself, except at the large count, where size blocks of it
/// would not fit memory; there a block of count/size + 1 elements still
/// spans several staging slots.
size_t block_count(size_t count) { return count > 100000 ? count / size_t(g_size) + 1 : count; }

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

      if (!new_sampled(g_big_new_reduction)) continue;
      // reduce, out of place and in place at two of the three roots; off
      // the root the output is NULL (out of place) or must stay untouched
      // (in place: the input is the buffer, and it is const there).
      for (int form = 0; form < 2; ++form) {
        const int root = root_at(g_combo + form);
        const bool in_place = form == 1;
        std::vector<std::byte> r_in(count * es + 1), r_out(count * es + 1, std::byte{0x5A});
        chorus::bench::fill_input(CHORUS_COLL_REDUCE, dtype, op, g_rank, g_size, r_in.data(), count,
                                  count);
        const std::vector<std::byte> original = r_in;
        chorus::bench::expected_output(CHORUS_COLL_REDUCE, false, dtype, op, g_rank, g_size, root,
                                       count, expect);
        void* dst = in_place ? r_in.data() : (g_rank == root ? r_out.data() : nullptr);
        rc = chorus_reduce(comm, r_in.data(), dst, count, dtype, op, root);
        std::string what = name(
            ("reduce" + std::string(in_place ? " in-place" : "") + " root=" + std::to_string(root))
                .c_str(),
            dtype, op, count);
        std::vector<std::byte>& got = in_place ? r_in : r_out;
        got.resize(count * es);
        if (g_rank == root) {
          check_result(what, rc, dtype, got, expect);
        } else {
          // Off the root nothing the caller owns changes.
          std::vector<std::byte> want(original.begin(), original.begin() + count * es);
          std::vector<std::byte> now(r_in.begin(), r_in.begin() + count * es);
          check_result(what + " (input unchanged off the root)", rc, dtype, now, want);
        }
      }
    }
  }
}

/// gather, scatter (each out of place and in place, at rotating roots),
/// all_to_all (both forms) and all_to_allv with uneven counts, for one dtype.
void run_rooted_and_all_to_all(chorus_comm_t* comm, size_t count, int dtype) {
  const size_t es = chorus_dtype_size(dtype);
  const size_t n = size_t(g_size);
  const size_t blk = block_count(count);
  const size_t all = blk * n;
  std::vector<std::byte> expect;
  const int spin = g_combo;  // the rotation of this dtype's roots
  for (int form = 0; form < 2; ++form) {
    const bool in_place = form == 1;
    const std::string how = in_place ? " in-place" : "";
    // gather
    {
      const int root = root_at(spin + form);
      std::vector<std::byte> in(blk * es + 1), out(all * es + 1, std::byte{0x5A});
      chorus::bench::fill_input(CHORUS_COLL_GATHER, dtype, -1, g_rank, g_size, in.data(), blk, blk);
      chorus::bench::expected_output(CHORUS_COLL_GATHER, false, dtype, -1, g_rank, g_size, root,
                                     blk, expect);
      const void* src = in.data();
      if (in_place && g_rank == root) {
        std::memcpy(out.data() + size_t(root) * blk * es, in.data(), blk * es);
        src = out.data() + size_t(root) * blk * es;
      }
      int rc = chorus_gather(comm, src, g_rank == root ? out.data() : nullptr, blk, dtype, root);
      out.resize(all * es);
      std::string what =
          name(("gather" + how + " root=" + std::to_string(root)).c_str(), dtype, -1, blk);
      if (g_rank == root) {
        check_result(what, rc, dtype, out, expect);
      } else {
        report(rc == CHORUS_OK, what + ": " + chorus_status_name(rc) + " " + chorus_last_error());
      }
    }
    // scatter
    {
      const int root = root_at(spin + 1 + form);
      std::vector<std::byte> in(all * es + 1), out(blk * es + 1, std::byte{0x5A});
      chorus::bench::fill_input(CHORUS_COLL_SCATTER, dtype, -1, g_rank, g_size, in.data(), all,
                                blk);
      chorus::bench::expected_output(CHORUS_COLL_SCATTER, false, dtype, -1, g_rank, g_size, root,
                                     blk, expect);
      void* dst = out.data();
      if (in_place && g_rank == root) dst = in.data() + size_t(root) * blk * es;
      int rc = chorus_scatter(comm, g_rank == root ? in.data() : nullptr, dst, blk, dtype, root);
      std::vector<std::byte> got(static_cast<std::byte*>(dst),
                                 static_cast<std::byte*>(dst) + blk * es);
      check_result(
          name(("scatter" + how + " root=" + std::to_string(root)).c_str(), dtype, -1, blk), rc,
          dtype, got, expect);
    }
    // all_to_all
    {
      std::vector<std::byte> in(all * es + 1), out(all * es + 1, std::byte{0x5A});
      chorus::bench::fill_input(CHORUS_COLL_ALL_TO_ALL, dtype, -1, g_rank, g_size, in.data(), all,
                                blk);
      chorus::bench::expected_output(CHORUS_COLL_ALL_TO_ALL, false, dtype, -1, g_rank, g_size, 0,
                                     blk, expect);
      std::vector<std::byte>& got = in_place ? in : out;
      int rc = chorus_all_to_all(comm, in.data(), got.data(), blk, dtype);
      got.resize(all * es);
      check_result(name(("all_to_all" + how).c_str(), dtype, -1, blk), rc, dtype, got, expect);
    }
  }
  // all_to_allv: rank r sends rank p sent(r, p) elements (0 included), packed
  // in peer order in the input with a one-element gap after each block, and
  // receives into the output in reverse peer order, so offsets are neither
  // zero-based nor monotonic. The gaps must keep their poison.
  auto sent = [&](int from, int to) -> size_t {
    return blk == 0 ? 0 : (blk + size_t(3 * from + to)) % (blk + 1);
  };
  auto send_layout = [&](int r, std::vector<size_t>& counts, std::vector<size_t>& offsets) {
    counts.assign(n, 0);
    offsets.assign(n, 0);
    size_t at = 0;
    for (int p = 0; p < g_size; ++p) {
      counts[size_t(p)] = sent(r, p);
      offsets[size_t(p)] = at;
      at += counts[size_t(p)] + 1;
    }
    return at;
  };
  std::vector<size_t> sc, so, rcnt(n), roff(n);
  const size_t in_elems = send_layout(g_rank, sc, so);
  size_t at = 0;
  for (int p = g_size - 1; p >= 0; --p) {
    rcnt[size_t(p)] = sent(p, g_rank);
    roff[size_t(p)] = at;
    at += rcnt[size_t(p)] + 1;
  }
  const size_t out_elems = at;
  std::vector<std::byte> in(in_elems * es + 1), out(out_elems * es + 1, std::byte{0x5A});
  chorus::bench::fill_input(CHORUS_COLL_ALL_TO_ALL, dtype, -1, g_rank, g_size, in.data(), in_elems,
                            in_elems);
  std::vector<std::byte> want(out_elems * es, std::byte{0x5A}), theirs;
  for (int p = 0; p < g_size; ++p) {
    std::vector<size_t> psc, pso;
    size_t p_elems = send_layout(p, psc, pso);
    theirs.assign(p_elems * es, std::byte{0});
    chorus::bench::fill_input(CHORUS_COLL_ALL_TO_ALL, dtype, -1, p, g_size, theirs.data(), p_elems,
                              p_elems);
    std::memcpy(want.data() + roff[size_t(p)] * es, theirs.data() + pso[size_t(g_rank)] * es,
                rcnt[size_t(p)] * es);
  }
  int rc = chorus_all_to_allv(comm, in.data(), sc.data(), so.data(), out.data(), rcnt.data(),
                              roff.data(), dtype);
  out.resize(out_elems * es);
  check_result(name("all_to_allv", dtype, -1, blk), rc, dtype, out, want);
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

    if (new_sampled(g_big_new_movement)) run_rooted_and_all_to_all(comm, count, dtype);

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
  rc = chorus_reduce(comm, x, x, 4, CHORUS_FLOAT32, CHORUS_SUM, -1);
  report(rc == CHORUS_ERR_INVALID_ARGUMENT && std::strstr(chorus_last_error(), "reduce root -1"),
         std::string("reduce: bad root refused: ") + chorus_last_error());
  rc = chorus_gather(comm, x, x, 4, CHORUS_FLOAT32, g_size);
  report(rc == CHORUS_ERR_INVALID_ARGUMENT && std::strstr(chorus_last_error(), "gather root"),
         std::string("gather: bad root refused: ") + chorus_last_error());
  rc = chorus_scatter(comm, x, x, SIZE_MAX / 2, CHORUS_FLOAT64, 0);
  report(rc == CHORUS_ERR_INVALID_ARGUMENT && std::strstr(chorus_last_error(), "overflows"),
         std::string("scatter: count overflow refused: ") + chorus_last_error());
  rc = chorus_all_to_all(comm, x, x + 1, 1, CHORUS_FLOAT32);
  report(g_size == 1
             ? rc == CHORUS_OK
             : rc == CHORUS_ERR_INVALID_ARGUMENT && std::strstr(chorus_last_error(), "overlap"),
         std::string("all_to_all: partial overlap refused: ") + chorus_last_error());
  {
    std::vector<size_t> c(size_t(g_size), 1), o(size_t(g_size), 0);
    std::vector<float> big(size_t(g_size) * 2, 0.0f), dst(size_t(g_size) * 2, 0.0f);
    // every receive block at offset 0: they overlap as soon as there are two
    rc = chorus_all_to_allv(comm, big.data(), c.data(), o.data(), dst.data(), c.data(), o.data(),
                            CHORUS_FLOAT32);
    report(g_size == 1
               ? rc == CHORUS_OK
               : rc == CHORUS_ERR_INVALID_ARGUMENT && std::strstr(chorus_last_error(), "overlap"),
           std::string("all_to_allv: overlapping receive blocks refused: ") + chorus_last_error());
    c[size_t(g_rank)] = 2;  // sends itself 2 but expects 1
    std::vector<size_t> rc1(static_cast<size_t>(g_size), 1), ro(static_cast<size_t>(g_size));
    for (size_t p = 0; p < ro.size(); ++p) ro[p] = 2 * p;
    rc = chorus_all_to_allv(comm, big.data(), c.data(), ro.data(), dst.data(), rc1.data(),
                            ro.data(), CHORUS_FLOAT32);
    report(rc == CHORUS_ERR_INVALID_ARGUMENT && std::strstr(chorus_last_error(), "send_counts["),
           std::string("all_to_allv: self counts disagree, refused: ") + chorus_last_error());
    rc = chorus_all_to_allv(comm, big.data(), nullptr, o.data(), dst.data(), c.data(), o.data(),
                            CHORUS_FLOAT32);
    report(rc == CHORUS_ERR_INVALID_ARGUMENT && std::strstr(chorus_last_error(), "NULL"),
           std::string("all_to_allv: NULL counts refused: ") + chorus_last_error());
  }
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
    else if (a == "--new-every" && i + 1 < argc)
      g_new.every = std::max(1, std::atoi(argv[++i]));
    else if (a == "--new-offset" && i + 1 < argc)
      g_new.offset = std::atoi(argv[++i]);
    else if (a == "--counts" && i + 1 < argc) {
      std::stringstream ss(argv[++i]);
      std::string item;
      while (std::getline(ss, item, ',')) counts.push_back(std::stoull(item));
    } else {
      std::fprintf(stderr,
                   "usage: collective_check [-a ALGORITHM] [--counts a,b,c] "
                   "[--big [--big-every K --big-offset J]] [--every N --offset M] "
                   "[--new-every K --new-offset J]\n");
      return 2;
    }
  }
  small.offset %= small.every;
  large.offset %= large.every;
  g_new.offset %= g_new.every;
  std::vector<std::string> settings;
  if (!algorithm.empty())
    for (const char* coll : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier",
                             "reduce", "gather", "scatter", "all_to_all", "all_to_allv"})
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
    g_big = big && count == kBigCount;
    g_sample = g_big ? large : small;
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
