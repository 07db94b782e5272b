// The measurement loop shared by the peer benchmarks (mpi_bench, gloo_bench),
// written to match chorus-bench (tools/bench/chorus_bench.cc) step for step,
// so their numbers compare with its numbers:
//
//  - sizes from -b to -e, multiplied by -f; for all_gather and reduce_scatter
//    the size is the large (gathered / scattered) buffer and the count is per
//    rank (nccl-tests convention);
//  - inputs and reference results from tools/bench/bench_data (float32, sum);
//  - -w untimed warm-up runs, then -n timed runs, each preceded by a barrier;
//  - per run, the slowest rank's time; the median over the runs is reported;
//  - busbw with the nccl-tests factors; -c checks every element of every
//    timed run on every rank, after a barrier that follows the run.
//
// Output is chorus-bench's --json line format (one object per size), so
// bench/compare.sh parses all three programs the same way.
#pragma once

#include <chorus/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tools/bench/bench_data.h"

namespace chorus::bench {

enum class PeerColl { kAllReduce, kAllGather, kReduceScatter };

struct PeerOptions {
  PeerColl coll = PeerColl::kAllReduce;
  std::string coll_name = "all_reduce";
  std::uint64_t min_bytes = 8;
  std::uint64_t max_bytes = std::uint64_t{64} << 20;
  double factor = 2.0;
  int iters = 20;
  int warmup = 5;
  bool check = false;
  std::string label;  // printed as "transport" (e.g. "tcp", "vader")
};

/// What a peer library provides to the loop. Every call is collective.
struct PeerBackend {
  virtual ~PeerBackend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void barrier() = 0;
  /// Prepares one run of `coll` on float32 buffers (untimed): e.g. copy the
  /// input of an in-place algorithm, build per-call option objects.
  virtual void prepare(PeerColl coll, const float* in, float* out, std::size_t count) {
    (void)coll, (void)in, (void)out, (void)count;
  }
  /// The timed operation: `count` is per rank for all_gather / reduce_scatter.
  virtual void run(PeerColl coll, const float* in, float* out, std::size_t count) = 0;
  /// Element-wise maximum across ranks, in place.
  virtual void max_doubles(double* v, std::size_t n) = 0;
  /// Sum across ranks.
  virtual std::uint64_t sum_u64(std::uint64_t v) = 0;
  virtual const char* library() const = 0;
};

inline bool parse_size(const char* text, std::uint64_t& out) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || v < 0) return false;
  const std::string unit(end);
  std::uint64_t mult = 1;
  if (unit == "K" || unit == "k") mult = std::uint64_t{1} << 10;
  else if (unit == "M" || unit == "m") mult = std::uint64_t{1} << 20;
  else if (unit == "G" || unit == "g") mult = std::uint64_t{1} << 30;
  else if (!unit.empty() && unit != "B") return false;
  out = static_cast<std::uint64_t>(v * static_cast<double>(mult));
  return true;
}

/// Parses the options chorus-bench shares: --coll, -b, -e, -f, -n, -w, -c,
/// --label. Returns false (after printing usage) on a bad command line.
inline bool parse_peer_options(int argc, char** argv, PeerOptions& o) {
  auto usage = [&] {
    std::fprintf(stderr,
                 "usage: %s [--coll all_reduce|all_gather|reduce_scatter] [-b 8] [-e 64M] "
                 "[-f 2] [-n 20] [-w 5] [-c] [--label NAME]\n",
                 argv[0]);
    return false;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "-c" || a == "--check") {
      o.check = true;
      continue;
    }
    const char* v = next();
    if (v == nullptr) return usage();
    if (a == "--coll") {
      o.coll_name = v;
      if (o.coll_name == "all_reduce") o.coll = PeerColl::kAllReduce;
      else if (o.coll_name == "all_gather") o.coll = PeerColl::kAllGather;
      else if (o.coll_name == "reduce_scatter") o.coll = PeerColl::kReduceScatter;
      else return usage();
    } else if (a == "-b") {
      if (!parse_size(v, o.min_bytes)) return usage();
    } else if (a == "-e") {
      if (!parse_size(v, o.max_bytes)) return usage();
    } else if (a == "-f") {
      o.factor = std::atof(v);
      if (o.factor <= 1.0) return usage();
    } else if (a == "-n") {
      o.iters = std::max(1, std::atoi(v));
    } else if (a == "-w") {
      o.warmup = std::max(0, std::atoi(v));
    } else if (a == "--label") {
      o.label = v;
    } else {
      return usage();
    }
  }
  return o.min_bytes <= o.max_bytes || usage();
}

inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Runs every size and prints one JSON line per size on rank 0. Returns the
/// number of wrong elements over all sizes and ranks.
inline std::uint64_t run_peer_bench(PeerBackend& b, const PeerOptions& o) {
  const int rank = b.rank();
  const int n = b.size();
  const int coll_id = o.coll == PeerColl::kAllReduce   ? CHORUS_COLL_ALL_REDUCE
                      : o.coll == PeerColl::kAllGather ? CHORUS_COLL_ALL_GATHER
                                                       : CHORUS_COLL_REDUCE_SCATTER;
  const double bus_factor = o.coll == PeerColl::kAllReduce ? 2.0 * (n - 1) / n
                                                           : static_cast<double>(n - 1) / n;
  // Settle before the first size: in the first second or so Open MPI's
  // launcher daemons still compete for the cores, which chorusrun does not.
  // Every rank runs the same number of barriers (rank 0 decides how many).
  {
    const auto t0 = std::chrono::steady_clock::now();
    double go = 1;
    while (go > 0) {
      b.barrier();
      go = std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1) ? 1 : 0;
      if (rank != 0) go = 0;
      b.max_doubles(&go, 1);
    }
  }
  std::uint64_t total_wrong = 0;
  for (double s = static_cast<double>(o.min_bytes); s <= static_cast<double>(o.max_bytes) * 1.0000001;
       s *= o.factor) {
    const auto bytes = static_cast<std::uint64_t>(s);
    std::size_t count = bytes / sizeof(float);
    if (o.coll != PeerColl::kAllReduce) count /= static_cast<std::size_t>(n);
    const std::size_t in_elems = o.coll == PeerColl::kReduceScatter ? count * n : count;
    const std::size_t out_elems = o.coll == PeerColl::kAllGather ? count * n : count;
    std::vector<float> in(std::max<std::size_t>(1, in_elems)), out(std::max<std::size_t>(1, out_elems));
    fill_input(coll_id, CHORUS_FLOAT32, CHORUS_SUM, rank, n, in.data(), in_elems, count);
    std::vector<std::byte> expect;
    if (o.check)
      expected_output(coll_id, false, CHORUS_FLOAT32, CHORUS_SUM, rank, n, 0, count, expect);

    for (int i = 0; i < o.warmup; ++i) {
      b.prepare(o.coll, in.data(), out.data(), count);
      b.run(o.coll, in.data(), out.data(), count);
    }
    std::vector<double> times(static_cast<std::size_t>(o.iters));
    std::uint64_t wrong = 0;
    for (int i = 0; i < o.iters; ++i) {
      // As chorus-bench: with -c every timed run's output is poisoned before
      // and checked after it, the check behind a barrier so that it runs
      // inside no rank's timed region.
      if (o.check) std::fill(out.begin(), out.end(), -12345.0f);
      b.prepare(o.coll, in.data(), out.data(), count);
      b.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      b.run(o.coll, in.data(), out.data(), count);
      times[static_cast<std::size_t>(i)] =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      if (o.check) {
        b.barrier();
        wrong += count_wrong(CHORUS_FLOAT32, out.data(), expect.data(), expect.size() / 4);
      }
    }
    b.max_doubles(times.data(), times.size());
    wrong = b.sum_u64(wrong);
    total_wrong += wrong;
    const double us = median_of(times);
    const double algbw = us > 0 ? static_cast<double>(bytes) / us / 1e3 : 0;
    if (rank == 0) {
      std::printf(
          "{\"coll\":\"%s\",\"ranks\":%d,\"transport\":\"%s\",\"algorithm\":\"%s\","
          "\"dtype\":\"float32\",\"op\":\"sum\",\"bytes\":%llu,\"count\":%zu,\"time_us\":%.3f,"
          "\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,\"wrong\":%llu,\"checked\":%s}\n",
          o.coll_name.c_str(), n, o.label.c_str(), b.library(),
          static_cast<unsigned long long>(bytes), count, us, algbw, algbw * bus_factor,
          static_cast<unsigned long long>(wrong), o.check ? "true" : "false");
      std::fflush(stdout);
    }
  }
  return total_wrong;
}

}  // namespace chorus::bench
