// chorus-bench: nccl-tests style benchmark and checker, written against the
// public C API only (as a host program would be).
//
// Timing: per iteration, barrier, then the timed operation; the slowest
// rank's time of each iteration counts, and the median over iterations is
// reported. busbw uses the nccl-tests factors so numbers compare across
// libraries.
//
// Checking (-c): every rank compares the output of every iteration, warm-up
// and timed, with the closed-form result (bench_data.h), outside the timed
// region: a timed iteration is checked after a barrier that follows it, so
// that no rank's check runs while another rank's timed call does. The
// verdict is each rank's own exit status: it is never combined with the
// collective under test, which could hide its own errors.
//
// Each size runs twice, as nccl-tests does: out-of-place (separate input and
// output) and in-place (all_reduce with in == out, all_gather with the input
// at this rank's block of the output); both are timed and both checked. The
// collectives without an in-place form in the Chorus API (reduce_scatter,
// whose output must not overlap its input; broadcast, which has one buffer
// and is reported out-of-place; barrier; sendrecv) show "n/a" there.
//
// Sizes are rounded down to a whole number of elements (for all_gather and
// reduce_scatter: of elements per rank), and the size printed is the one that
// ran; a header line says so when a requested size was rounded.
#include <chorus/chorus.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <complex>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tools/bench/bench_data.h"

namespace {

struct Options {
  std::string coll = "all_reduce";
  std::string op = "sum";
  std::string dtype = "float32";
  std::string algorithm;
  std::string min_bytes = "8";
  std::string max_bytes = "64M";
  double factor = 2.0;
  int iters = 20;
  int warmup = 5;
  bool check = false;
  bool json = false;
  bool stats = false;
  bool no_inplace = false;
  int root = 0;
};

enum class Coll {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kBarrier,
  kSendRecv,
  kReduce,
  kGather,
  kScatter,
  kAllToAll,
  kAllToAllv
};

bool parse_bytes(const std::string& text, uint64_t& out) {
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || v < 0) return false;
  std::string unit(end);
  uint64_t mult = 1;
  if (unit == "K" || unit == "k") mult = 1ull << 10;
  else if (unit == "M" || unit == "m") mult = 1ull << 20;
  else if (unit == "G" || unit == "g") mult = 1ull << 30;
  else if (!unit.empty() && unit != "B") return false;
  out = uint64_t(v * double(mult));
  return true;
}

int fail(const char* what, int rc) {
  std::fprintf(stderr, "chorus-bench: %s failed: %s: %s\n", what, chorus_status_name(rc),
               chorus_last_error());
  return 1;
}

/// ops.<collective>.<algorithm> counters: how often each algorithm ran.
std::vector<std::pair<std::string, uint64_t>> algorithm_runs(chorus_comm_t* comm,
                                                             const std::string& coll) {
  size_t n = 0;
  chorus_comm_counters(comm, nullptr, 0, &n);
  std::vector<chorus_counter_t> c(n + 8);
  chorus_comm_counters(comm, c.data(), c.size(), &n);
  const std::string prefix = "ops." + coll + ".";
  std::vector<std::pair<std::string, uint64_t>> out;
  for (size_t i = 0; i < n && i < c.size(); ++i)
    if (std::strncmp(c[i].name, prefix.c_str(), prefix.size()) == 0)
      out.emplace_back(c[i].name + prefix.size(), c[i].value);
  return out;
}

/// The algorithms whose run count grew between two algorithm_runs snapshots,
/// joined with '+' ("ring"; "mesh+ring" if auto switched within the size).
std::string algorithms_that_ran(const std::vector<std::pair<std::string, uint64_t>>& before,
                                const std::vector<std::pair<std::string, uint64_t>>& after) {
  std::string out;
  for (const auto& [name, value] : after) {
    uint64_t was = 0;
    for (const auto& [n0, v0] : before)
      if (n0 == name) was = v0;
    if (value > was) out += (out.empty() ? "" : "+") + name;
  }
  return out.empty() ? "?" : out;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"chorus-bench: benchmark and check Chorus collectives (run under chorusrun)"};
  app.add_option("--coll", o.coll,
                 "all_reduce | all_gather | reduce_scatter | broadcast | barrier | sendrecv | "
                 "reduce | gather | scatter | all_to_all | all_to_allv (equal counts through the "
                 "per-peer call)")
      ->check(
          CLI::IsMember({"all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier",
                         "sendrecv", "reduce", "gather", "scatter", "all_to_all", "all_to_allv"}));
  app.add_option("-o,--op", o.op, "sum | prod | max | min");
  app.add_option("-d,--dtype", o.dtype, "element type (float32, bfloat16, int64, ...)");
  app.add_option("-a,--algorithm", o.algorithm, "pin the algorithm (ring, mesh, a plugin, auto)");
  app.add_option("-b,--minbytes", o.min_bytes, "smallest size in bytes (K/M/G suffixes)");
  app.add_option("-e,--maxbytes", o.max_bytes, "largest size in bytes (K/M/G suffixes)");
  app.add_option("-f,--stepfactor", o.factor, "size multiplier between steps")->check(CLI::Range(1.01, 1024.0));
  app.add_option("-n,--iters", o.iters, "timed iterations per size")->check(CLI::Range(1, 1000000));
  app.add_option("-w,--warmup", o.warmup, "untimed iterations per size")->check(CLI::Range(0, 1000000));
  app.add_option("-r,--root", o.root, "root of broadcast, reduce, gather and scatter");
  app.add_flag("-c,--check", o.check,
               "check every element of every iteration (warm-up and timed) on every rank, "
               "outside the timed region; each rank prints its own count of wrong elements and "
               "exits 3 if it found any");
  app.add_flag("--json", o.json, "one JSON object per size instead of the table");
  app.add_flag("--no-inplace", o.no_inplace,
               "run out-of-place only (the in-place columns show n/a; JSON \"inplace\": null)");
  app.add_flag("--stats", o.stats,
               "at the end, print every rank's communicator counters (lines \"# stats r<rank> "
               "<comm> <name> <value>\")");
  CLI11_PARSE(app, argc, argv);

  int dtype = 0, op = 0;
  if (chorus_dtype_from_name(o.dtype.c_str(), &dtype) != CHORUS_OK) {
    std::fprintf(stderr, "chorus-bench: %s\n", chorus_last_error());
    return 2;
  }
  if (chorus_op_from_name(o.op.c_str(), &op) != CHORUS_OK) {
    std::fprintf(stderr, "chorus-bench: %s\n", chorus_last_error());
    return 2;
  }
  uint64_t min_bytes = 0, max_bytes = 0;
  if (!parse_bytes(o.min_bytes, min_bytes) || !parse_bytes(o.max_bytes, max_bytes) ||
      min_bytes > max_bytes) {
    std::fprintf(stderr, "chorus-bench: bad size range -b %s -e %s (use e.g. -b 8 -e 64M)\n",
                 o.min_bytes.c_str(), o.max_bytes.c_str());
    return 2;
  }
  Coll coll = o.coll == "all_reduce"       ? Coll::kAllReduce
              : o.coll == "all_gather"     ? Coll::kAllGather
              : o.coll == "reduce_scatter" ? Coll::kReduceScatter
              : o.coll == "broadcast"      ? Coll::kBroadcast
              : o.coll == "barrier"        ? Coll::kBarrier
              : o.coll == "reduce"         ? Coll::kReduce
              : o.coll == "gather"         ? Coll::kGather
              : o.coll == "scatter"        ? Coll::kScatter
              : o.coll == "all_to_all"     ? Coll::kAllToAll
              : o.coll == "all_to_allv"    ? Coll::kAllToAllv
                                           : Coll::kSendRecv;
  int coll_id = coll == Coll::kAllReduce       ? CHORUS_COLL_ALL_REDUCE
                : coll == Coll::kAllGather     ? CHORUS_COLL_ALL_GATHER
                : coll == Coll::kReduceScatter ? CHORUS_COLL_REDUCE_SCATTER
                : coll == Coll::kBroadcast     ? CHORUS_COLL_BROADCAST
                : coll == Coll::kReduce        ? CHORUS_COLL_REDUCE
                : coll == Coll::kGather        ? CHORUS_COLL_GATHER
                : coll == Coll::kScatter       ? CHORUS_COLL_SCATTER
                : coll == Coll::kAllToAll      ? CHORUS_COLL_ALL_TO_ALL
                : coll == Coll::kAllToAllv     ? CHORUS_COLL_ALL_TO_ALLV
                                               : CHORUS_COLL_BARRIER;

  std::vector<std::string> settings;
  if (!o.algorithm.empty() && coll != Coll::kSendRecv)
    settings.push_back("algorithm." + o.coll + "=\"" + o.algorithm + "\"");
  std::vector<const char*> settings_c;
  for (const auto& s : settings) settings_c.push_back(s.c_str());
  chorus_options_t opts;
  chorus_options_init(&opts);
  opts.settings = settings_c.data();
  opts.settings_count = settings_c.size();
  chorus_comm_t* comm = nullptr;
  if (int rc = chorus_comm_init(&opts, &comm); rc != CHORUS_OK) return fail("init", rc);
  // Finalized on every way out, a failed call's too: a rank that exits
  // without it closes its connections unannounced, and the peers still
  // finishing an earlier call (the barrier before a call this rank refused
  // at once) would take that for a lost rank.
  struct Finalize {
    chorus_comm_t* comm;
    ~Finalize() { chorus_comm_finalize(comm); }
  } finalize_on_exit{comm};
  int rank = 0, nranks = 1;
  chorus_comm_rank(comm, &rank);
  chorus_comm_size(comm, &nranks);
  if (coll == Coll::kSendRecv && nranks < 2) {
    std::fprintf(stderr, "chorus-bench: sendrecv needs at least 2 ranks\n");
    return 2;
  }
  if (o.root < 0 || o.root >= nranks) {
    std::fprintf(stderr, "chorus-bench: root %d out of range\n", o.root);
    return 2;
  }

  const size_t esize = chorus::bench::element_size(dtype);
  double bus_factor = 1.0;
  if (coll == Coll::kAllReduce) bus_factor = 2.0 * (nranks - 1) / nranks;
  // Per-rank blocks (size = the large buffer, as nccl-tests counts them).
  const bool blocks = coll == Coll::kAllGather || coll == Coll::kReduceScatter ||
                      coll == Coll::kGather || coll == Coll::kScatter || coll == Coll::kAllToAll ||
                      coll == Coll::kAllToAllv;
  if (blocks) bus_factor = double(nranks - 1) / nranks;

  uint64_t total_wrong = 0;
  double busbw_sum = 0;
  int busbw_n = 0;
  std::vector<uint64_t> sizes;
  if (coll == Coll::kBarrier) sizes.push_back(0);
  else
    for (double s = double(min_bytes); s <= double(max_bytes) * 1.0000001; s *= o.factor) {
      sizes.push_back(uint64_t(s));
      if (o.factor <= 1.0) break;
    }
  // Whole elements only (per rank where the size is the gathered buffer):
  // round each size down and report the size that actually ran.
  const bool per_rank_blocks = coll == Coll::kAllGather || coll == Coll::kReduceScatter;
  const uint64_t unit = esize * (per_rank_blocks ? uint64_t(nranks) : 1);
  std::string rounded_note;
  for (uint64_t& bytes : sizes) {
    const uint64_t whole = bytes / unit * unit;
    if (whole != bytes && rounded_note.size() < 200)
      rounded_note += (rounded_note.empty() ? "" : ", ") + std::to_string(bytes) + " -> " +
                      std::to_string(whole);
    bytes = whole;
  }
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  const bool has_inplace = !o.no_inplace && (coll == Coll::kAllReduce || coll == Coll::kAllGather);

  if (rank == 0 && !o.json) {
    std::printf(
        "# chorus-bench %s: %d ranks, transport %s, dtype %s, op %s, iters %d, warmup %d%s\n",
        o.coll.c_str(), nranks, chorus_comm_transport(comm), o.dtype.c_str(), o.op.c_str(), o.iters,
        o.warmup, o.check ? ", checking every iteration on every rank (#wrong: rank 0's)" : "");
    if (!rounded_note.empty())
      std::printf("# sizes rounded down to whole %s elements%s: %s\n", o.dtype.c_str(),
                  per_rank_blocks ? " per rank" : "", rounded_note.c_str());
    std::printf("# %12s %12s %10s  %-40s  %s\n", "", "", "",
                "------------ out-of-place ------------", "------------- in-place -------------");
    std::printf("# %12s %12s %10s %10s %9s %9s %7s %10s %9s %9s %7s\n", "size(B)", "count",
                "algorithm", "time(us)", "algbw", "busbw", "#wrong", "time(us)", "algbw", "busbw",
                "#wrong");
    // The header says init is done: out now, also when stdout is a file.
    std::fflush(stdout);
  }

  for (uint64_t bytes : sizes) {
    // nccl-tests convention: for all_gather / reduce_scatter the size is the
    // large (gathered / scattered) buffer and count is per rank.
    size_t count = size_t(bytes / esize);
    if (blocks) count /= size_t(nranks);
    const bool big_in = coll == Coll::kReduceScatter || coll == Coll::kScatter ||
                        coll == Coll::kAllToAll || coll == Coll::kAllToAllv;
    const bool big_out = coll == Coll::kAllGather || coll == Coll::kGather ||
                         coll == Coll::kAllToAll || coll == Coll::kAllToAllv;
    size_t in_elems = big_in ? count * size_t(nranks) : count;
    size_t out_elems = big_out ? count * size_t(nranks) : count;
    // all_to_allv with equal blocks: the per-peer call against all_to_all.
    std::vector<size_t> v_counts(static_cast<size_t>(nranks), count);
    std::vector<size_t> v_offsets(static_cast<size_t>(nranks));
    for (size_t p = 0; p < v_offsets.size(); ++p) v_offsets[p] = p * count;
    std::vector<std::byte> in(std::max<size_t>(1, in_elems * esize));
    std::vector<std::byte> out(std::max<size_t>(1, out_elems * esize));
    std::vector<std::byte> expect;
    chorus::bench::fill_input(coll_id, dtype, op, rank, nranks, in.data(), in_elems, count);
    if (o.check)
      chorus::bench::expected_output(
          coll == Coll::kAllToAllv ? int(CHORUS_COLL_ALL_TO_ALL) : coll_id, o.coll == "sendrecv",
          dtype, op, rank, nranks, o.root, count, expect);

    // One pass (warm-up + timed iterations) of the out-of-place or in-place
    // form. Outside the timed region: poison the output so that stale data
    // cannot pass the check, and put the input where the in-place form (and
    // the broadcast root) expects it.
    const size_t block = count * esize;
    struct Pass {
      double us = 0;
      uint64_t wrong = 0;  // this rank's, over every iteration of this size
      int bad_iterations = 0;
      std::string first_bad;
      std::string algorithms;  // that ran the operation under test
    };
    auto run_pass = [&](bool inplace, Pass& pass) -> int {
      auto prepare = [&] {
        if (o.check) std::fill(out.begin(), out.end(), std::byte{0xA5});
        if (coll == Coll::kBroadcast && rank == o.root) std::memcpy(out.data(), in.data(), block);
        if (inplace && coll == Coll::kAllReduce) std::memcpy(out.data(), in.data(), block);
        if (inplace && coll == Coll::kAllGather)
          std::memcpy(out.data() + size_t(rank) * block, in.data(), block);
      };
      auto check = [&](const char* phase, int iteration) {
        if (!o.check) return;
        const uint64_t w =
            chorus::bench::count_wrong(dtype, out.data(), expect.data(), expect.size() / esize);
        if (w == 0) return;
        pass.wrong += w;
        if (pass.bad_iterations++ == 0)
          pass.first_bad = std::string(inplace ? "in-place " : "") + phase + " iteration " +
                           std::to_string(iteration);
      };
      auto run_once = [&]() -> int {
        switch (coll) {
          case Coll::kAllReduce:
            return chorus_all_reduce(comm, inplace ? out.data() : in.data(), out.data(), count,
                                     dtype, op);
          case Coll::kAllGather:
            return chorus_all_gather(comm, inplace ? out.data() + size_t(rank) * block : in.data(),
                                     out.data(), count, dtype);
          case Coll::kReduceScatter:
            return chorus_reduce_scatter(comm, in.data(), out.data(), count, dtype, op);
          case Coll::kBroadcast:
            return chorus_broadcast(comm, out.data(), count, dtype, o.root);
          case Coll::kBarrier:
            return chorus_barrier(comm);
          case Coll::kReduce:
            return chorus_reduce(comm, in.data(), out.data(), count, dtype, op, o.root);
          case Coll::kGather:
            return chorus_gather(comm, in.data(), out.data(), count, dtype, o.root);
          case Coll::kScatter:
            return chorus_scatter(comm, in.data(), out.data(), count, dtype, o.root);
          case Coll::kAllToAll:
            return chorus_all_to_all(comm, in.data(), out.data(), count, dtype);
          case Coll::kAllToAllv:
            return chorus_all_to_allv(comm, in.data(), v_counts.data(), v_offsets.data(),
                                      out.data(), v_counts.data(), v_offsets.data(), dtype);
          case Coll::kSendRecv: {
            // Ring exchange: even ranks send first, odd ranks receive first.
            int right = (rank + 1) % nranks, left = (rank - 1 + nranks) % nranks;
            if (rank % 2 == 0) {
              if (int rc = chorus_send(comm, in.data(), count, dtype, right)) return rc;
              return chorus_recv(comm, out.data(), count, dtype, left);
            }
            if (int rc = chorus_recv(comm, out.data(), count, dtype, left)) return rc;
            return chorus_send(comm, in.data(), count, dtype, right);
          }
        }
        return CHORUS_ERR_INTERNAL;
      };
      // Counted around the operations under test only: the all_reduce that
      // collects the times below is the bench's own.
      const auto runs_before = algorithm_runs(comm, o.coll);
      for (int i = 0; i < o.warmup; ++i) {
        prepare();
        if (int rc = run_once(); rc != CHORUS_OK) return fail(o.coll.c_str(), rc);
        check("warm-up", i);
      }
      std::vector<double> times(size_t(o.iters), 0.0);
      for (int i = 0; i < o.iters; ++i) {
        prepare();
        if (int rc = chorus_barrier(comm); rc != CHORUS_OK) return fail("barrier", rc);
        auto t0 = std::chrono::steady_clock::now();
        if (int rc = run_once(); rc != CHORUS_OK) return fail(o.coll.c_str(), rc);
        times[size_t(i)] =
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                .count();
        // With -c, a barrier first: on a host with more ranks than cores, a
        // rank that finished early and checked at once took the CPU from a
        // rank still inside its timed call (measured: 4 ranks on 2 cores,
        // 1 MiB all_gather, 95 us unchecked against 430 us checked).
        if (o.check)
          if (int rc = chorus_barrier(comm); rc != CHORUS_OK) return fail("barrier", rc);
        check("timed", i);  // between two barriers: inside no rank's timed region
      }
      pass.algorithms = algorithms_that_ran(runs_before, algorithm_runs(comm, o.coll));
      if (int rc = chorus_all_reduce(comm, times.data(), times.data(), times.size(), CHORUS_FLOAT64,
                                     CHORUS_MAX);
          rc != CHORUS_OK)
        return fail("collecting times", rc);
      pass.us = median(times);
      if (pass.wrong > 0)
        std::fprintf(stderr,
                     "chorus-bench: rank %d: %s%s of %llu bytes: %llu wrong elements in %d of %d "
                     "iterations (first in %s)\n",
                     rank, inplace ? "in-place " : "", o.coll.c_str(), (unsigned long long)bytes,
                     (unsigned long long)pass.wrong, pass.bad_iterations, o.warmup + o.iters,
                     pass.first_bad.c_str());
      return 0;
    };

    Pass oop, inp;
    if (int rc = run_pass(false, oop)) return rc;
    if (has_inplace)
      if (int rc = run_pass(true, inp)) return rc;
    std::string algo = coll == Coll::kSendRecv ? std::string("p2p") : oop.algorithms;
    if (has_inplace && inp.algorithms != oop.algorithms) algo += "/" + inp.algorithms;
    total_wrong += oop.wrong + inp.wrong;

    auto algbw_of = [&](double us) { return us > 0 ? double(bytes) / us / 1e3 : 0; };
    const double algbw = algbw_of(oop.us), busbw = algbw * bus_factor;
    const double ip_algbw = algbw_of(inp.us), ip_busbw = ip_algbw * bus_factor;
    if (bytes > 0) {
      busbw_sum += busbw;
      ++busbw_n;
      if (has_inplace) {
        busbw_sum += ip_busbw;
        ++busbw_n;
      }
    }
    if (rank == 0) {
      if (o.json) {
        char inplace_json[256] = "null";
        if (has_inplace)
          std::snprintf(inplace_json, sizeof inplace_json,
                        "{\"time_us\":%.3f,\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,\"wrong\":%llu}",
                        inp.us, ip_algbw, ip_busbw, (unsigned long long)inp.wrong);
        std::printf(
            "{\"coll\":\"%s\",\"ranks\":%d,\"transport\":\"%s\",\"algorithm\":\"%s\","
            "\"dtype\":\"%s\",\"op\":\"%s\",\"bytes\":%llu,\"count\":%zu,\"time_us\":%.3f,"
            "\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,\"wrong\":%llu,\"checked\":%s,"
            "\"inplace\":%s}\n",
            o.coll.c_str(), nranks, chorus_comm_transport(comm), algo.c_str(), o.dtype.c_str(),
            o.op.c_str(), (unsigned long long)bytes, count, oop.us, algbw, busbw,
            (unsigned long long)oop.wrong, o.check ? "true" : "false", inplace_json);
      } else {
        auto wrong_text = [&](uint64_t w) {
          return o.check ? std::to_string(w) : std::string("-");
        };
        char inplace_text[96];
        if (has_inplace)
          std::snprintf(inplace_text, sizeof inplace_text, "%10.2f %9.3f %9.3f %7s", inp.us,
                        ip_algbw, ip_busbw, wrong_text(inp.wrong).c_str());
        else
          std::snprintf(inplace_text, sizeof inplace_text, "%10s %9s %9s %7s", "n/a", "n/a", "n/a",
                        "n/a");
        std::printf("  %12llu %12zu %10s %10.2f %9.3f %9.3f %7s %s\n", (unsigned long long)bytes,
                    count, algo.c_str(), oop.us, algbw, busbw, wrong_text(oop.wrong).c_str(),
                    inplace_text);
      }
      std::fflush(stdout);
    }
  }
  if (o.stats) {
    // Snapshot first: every rank has finished the same collectives here, so
    // the per-peer numbers of all ranks are consistent with each other. The
    // barriers that order the printing come after it.
    size_t n = 0;
    chorus_comm_counters(comm, nullptr, 0, &n);
    std::vector<chorus_counter_t> counters(n);
    if (int rc = chorus_comm_counters(comm, counters.data(), n, &n); rc != CHORUS_OK)
      return fail("reading counters", rc);
    for (int r = 0; r < nranks; ++r) {
      if (r == rank) {
        for (size_t i = 0; i < n && i < counters.size(); ++i)
          std::printf("# stats r%d %s %s %llu\n", rank, chorus_comm_id(comm), counters[i].name,
                      (unsigned long long)counters[i].value);
        std::fflush(stdout);
      }
      if (int rc = chorus_barrier(comm); rc != CHORUS_OK) return fail("barrier", rc);
    }
  }
  if (rank == 0 && !o.json)
    std::printf("# Average busbw: %.3f GB/s over %d results (out-of-place and in-place)\n",
                busbw_n ? busbw_sum / busbw_n : 0.0, busbw_n);
  // Every rank reports its own count (stderr with --json, whose stdout is
  // JSON lines only), and its exit status is its own verdict.
  if (o.check)
    std::fprintf(o.json ? stderr : stdout, "# Wrong elements: %llu\n",
                 (unsigned long long)total_wrong);
  else if (rank == 0 && !o.json)
    std::printf("# Wrong elements: 0 (not checked; pass -c)\n");
  std::fflush(stdout);
  return total_wrong == 0 ? 0 : 3;
}
