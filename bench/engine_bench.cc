// chorus-engine-bench: what the execution engine gives a host program that
// keeps several operations in flight (issue #18, part 7), through the public
// C API only. Run under chorusrun.
//
//   inflight: K non-blocking all_reduces (float32 sum, B bytes each, K
//     buffers) posted back to back and then waited, against the same K run
//     one at a time with the blocking call. Per iteration: barrier, then the
//     timed batch; the slowest rank's time counts; medians over the
//     iterations, both modes interleaved iteration by iteration so that a
//     noisy neighbour hits both alike. Prints both medians and their ratio
//     (one-at-a-time / in-flight: above 1 means overlap helps). --group adds
//     a third mode, interleaved with the other two: the same K posts inside
//     chorus_group_start/chorus_group_end (consecutive all_reduces fuse up
//     to collectives.fusion_bytes), with its median and ratio. --bucket
//     carves the K inputs and the K outputs end to end out of one block
//     each (a gradient bucket's layout) in every mode; a fused run then
//     needs no staging copy.
//   pingpong: ranks 0 and 1 bounce a message with isend/irecv (posted in
//     that order and waited), sizes from -b to -e; half the median round
//     trip is the one-way latency, as osu_latency reports it. Other ranks
//     only join the init and the checks. --tagged uses the tagged calls.
//
// -c checks every element of every result on every rank (outside the timed
// region); a rank that finds a wrong element says so and exits 3.
#include <chorus/chorus.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_driver.h"

namespace {

using Clock = std::chrono::steady_clock;

int fail(const char* what, int rc) {
  std::fprintf(stderr, "chorus-engine-bench: %s failed: %s: %s\n", what, chorus_status_name(rc),
               chorus_last_error());
  return 1;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// The slowest rank's value.
int slowest(chorus_comm_t* comm, double& t) {
  double in = t;
  const int rc = chorus_all_reduce(comm, &in, &t, 1, CHORUS_FLOAT64, CHORUS_MAX);
  return rc;
}

/// A counter of `comm` by name (0 when absent).
std::uint64_t counter(chorus_comm_t* comm, const std::string& name) {
  std::size_t n = 0;
  chorus_comm_counters(comm, nullptr, 0, &n);
  std::vector<chorus_counter_t> all(n);
  chorus_comm_counters(comm, all.data(), all.size(), &n);
  for (std::size_t i = 0; i < n && i < all.size(); ++i)
    if (name == all[i].name) return all[i].value;
  return 0;
}

/// Input of rank r, op k, element i: small integers, so float32 sums are exact.
float input(int r, int k, std::size_t i) { return float((r + 1) * 3 + k * 7 + int(i % 13)); }

float expected(int size, int k, std::size_t i) {
  float sum = 0;
  for (int r = 0; r < size; ++r) sum += input(r, k, i);
  return sum;
}

struct Options {
  std::string mode;
  std::uint64_t bytes = 64 << 10;
  int ops = 16;
  int iters = 30;
  int warmup = 3;
  std::uint64_t min_bytes = 8;
  std::uint64_t max_bytes = 64 << 10;
  bool check = false;
  bool blocking = false;
  bool tagged = false;
  bool group = false;
  bool bucket = false;
  int wait_ms = -1;
};

int run_inflight(chorus_comm_t* comm, int rank, int size, const Options& o) {
  const std::size_t count = std::max<std::uint64_t>(1, o.bytes / sizeof(float));
  // K buffers of their own, or (--bucket) K slices end to end of one input
  // and one output block, as a framework lays out a gradient bucket.
  const std::size_t k_ops = std::size_t(o.ops);
  std::vector<std::vector<float>> blocks(o.bucket ? 2 : 2 * k_ops);
  std::vector<float*> in(k_ops), out(k_ops);
  for (std::size_t k = 0; k < k_ops; ++k) {
    if (o.bucket) {
      if (k == 0) blocks[0].resize(count * k_ops), blocks[1].resize(count * k_ops);
      in[k] = blocks[0].data() + k * count, out[k] = blocks[1].data() + k * count;
    } else {
      blocks[2 * k].resize(count), blocks[2 * k + 1].resize(count);
      in[k] = blocks[2 * k].data(), out[k] = blocks[2 * k + 1].data();
    }
    std::fill(out[k], out[k] + count, 0.0f);
    for (std::size_t i = 0; i < count; ++i) in[k][i] = input(rank, int(k), i);
  }
  std::uint64_t wrong = 0;
  auto check = [&] {
    for (std::size_t k = 0; k < k_ops; ++k) {
      for (std::size_t i = 0; i < count; ++i)
        if (out[k][i] != expected(size, int(k), i)) ++wrong;
      std::fill(out[k], out[k] + count, 0.0f);
    }
  };
  std::vector<double> times[3];  // one at a time, in flight, in flight grouped
  std::vector<chorus_request_t*> reqs(std::size_t(o.ops), nullptr);
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    // Mode 0: blocking, one at a time. Mode 1: all posted, then waited.
    // Mode 2 (--group): posted inside a group, then waited.
    for (int mode = 0; mode < (o.group ? 3 : 2); ++mode) {
      if (int rc = chorus_barrier(comm); rc != CHORUS_OK) return fail("barrier", rc);
      const auto t0 = Clock::now();
      if (mode == 2)
        if (int rc = chorus_group_start(); rc != CHORUS_OK) return fail("group_start", rc);
      for (int k = 0; k < o.ops; ++k) {
        float* dst = out[std::size_t(k)];
        const float* src = in[std::size_t(k)];
        const int rc = mode == 0
                           ? chorus_all_reduce(comm, src, dst, count, CHORUS_FLOAT32, CHORUS_SUM)
                           : chorus_iall_reduce(comm, src, dst, count, CHORUS_FLOAT32, CHORUS_SUM,
                                                &reqs[std::size_t(k)]);
        if (rc != CHORUS_OK) return fail(mode == 0 ? "all_reduce" : "iall_reduce", rc);
      }
      if (mode == 2)
        if (int rc = chorus_group_end(); rc != CHORUS_OK) return fail("group_end", rc);
      if (mode >= 1) {
        for (chorus_request_t*& r : reqs) {
          if (int rc = chorus_wait(r, -1); rc != CHORUS_OK) return fail("wait", rc);
          chorus_request_free(r);
          r = nullptr;
        }
      }
      double t = seconds_since(t0);
      if (int rc = slowest(comm, t); rc != CHORUS_OK) return fail("all_reduce (timing)", rc);
      if (it >= o.warmup) times[mode].push_back(t);
      if (o.check) check();
    }
  }
  const double seq = median(times[0]), par = median(times[1]), grp = median(times[2]);
  if (rank == 0) {
    std::string grouped;
    if (o.group) {
      char text[96];
      std::snprintf(text, sizeof(text), "\"grouped_us\": %.1f, \"grouped_ratio\": %.3f, ",
                    grp * 1e6, grp > 0 ? seq / grp : 0.0);
      grouped = text;
    }
    std::printf(
        "{\"bench\": \"inflight\", \"ranks\": %d, \"transport\": \"%s\", \"bytes\": %llu, "
        "\"ops\": %d, \"iters\": %d, \"one_at_a_time_us\": %.1f, \"in_flight_us\": %.1f, "
        "\"ratio\": %.3f, %s\"bucket\": %s, \"checked\": %s}\n",
        size, chorus_comm_transport(comm), static_cast<unsigned long long>(count * sizeof(float)),
        o.ops, o.iters, seq * 1e6, par * 1e6, par > 0 ? seq / par : 0.0, grouped.c_str(),
        o.bucket ? "true" : "false", o.check ? "true" : "false");
  }
  if (o.check) {
    std::printf("# rank %d: %llu wrong elements\n", rank, static_cast<unsigned long long>(wrong));
    if (wrong != 0) return 3;
  }
  return 0;
}

int run_pingpong(chorus_comm_t* comm, int rank, int size, const Options& o) {
  if (size < 2) {
    std::fprintf(stderr, "chorus-engine-bench: pingpong needs at least 2 ranks\n");
    return 2;
  }
  std::uint64_t wrong = 0;
  for (std::uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    std::vector<std::uint8_t> send(bytes), recv(bytes);
    std::vector<double> rtt;
    const std::uint64_t by_waiter0 = counter(comm, "ops.run_by_waiter");
    const std::uint64_t queued0 = counter(comm, "ops.queued");
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      for (std::size_t i = 0; i < bytes; ++i)
        send[i] = std::uint8_t((i * 31 + std::size_t(it)) ^ std::size_t(rank));
      if (int rc = chorus_barrier(comm); rc != CHORUS_OK) return fail("barrier", rc);
      if (rank > 1) continue;
      const int peer = 1 - rank;
      const auto t0 = Clock::now();
      chorus_request_t* s = nullptr;
      chorus_request_t* r = nullptr;
      // Rank 0 sends first and then receives the echo; rank 1 receives, then sends.
      for (int leg = 0; leg < 2; ++leg) {
        const bool sending = (leg == 0) == (rank == 0);
        if (o.blocking && o.tagged) {
          const int rc =
              sending
                  ? chorus_send_tagged(comm, send.data(), bytes, CHORUS_UINT8, peer, 5)
                  : chorus_recv_tagged(comm, recv.data(), bytes, CHORUS_UINT8, peer, 5, nullptr);
          if (rc != CHORUS_OK) return fail(sending ? "send_tagged" : "recv_tagged", rc);
          continue;
        }
        if (o.blocking) {
          const int rc = sending ? chorus_send(comm, send.data(), bytes, CHORUS_UINT8, peer)
                                 : chorus_recv(comm, recv.data(), bytes, CHORUS_UINT8, peer);
          if (rc != CHORUS_OK) return fail(sending ? "send" : "recv", rc);
          continue;
        }
        const int rc =
            o.tagged
                ? (sending
                       ? chorus_isend_tagged(comm, send.data(), bytes, CHORUS_UINT8, peer, 5, &s)
                       : chorus_irecv_tagged(comm, recv.data(), bytes, CHORUS_UINT8, peer, 5, &r))
                : (sending ? chorus_isend(comm, send.data(), bytes, CHORUS_UINT8, peer, &s)
                           : chorus_irecv(comm, recv.data(), bytes, CHORUS_UINT8, peer, &r));
        if (rc != CHORUS_OK) return fail(sending ? "isend" : "irecv", rc);
        chorus_request_t*& req = sending ? s : r;
        if (int w = chorus_wait(req, o.wait_ms); w != CHORUS_OK) return fail("wait", w);
        chorus_request_free(req);
        req = nullptr;
      }
      if (it >= o.warmup) rtt.push_back(seconds_since(t0));
      if (o.check) {
        for (std::size_t i = 0; i < bytes; ++i)
          if (recv[i] != std::uint8_t((i * 31 + std::size_t(it)) ^ std::size_t(peer))) ++wrong;
      }
    }
    if (rank == 0) {
      std::printf(
          "{\"bench\": \"pingpong\", \"ranks\": %d, \"transport\": \"%s\", \"calls\": \"%s%s\", "
          "\"bytes\": %llu, \"iters\": %d, \"latency_us\": %.2f, \"run_by_waiter\": \"%llu of "
          "%llu\", \"checked\": %s}\n",
          size, chorus_comm_transport(comm),
          o.tagged ? (o.blocking ? "send_tagged/recv_tagged" : "isend_tagged/irecv_tagged")
                   : (o.blocking ? "send/recv" : "isend/irecv"),
          !o.blocking && o.wait_ms >= 0 ? " (wait with a limit)" : "",
          static_cast<unsigned long long>(bytes), o.iters, median(rtt) / 2 * 1e6,
          static_cast<unsigned long long>(counter(comm, "ops.run_by_waiter") - by_waiter0),
          static_cast<unsigned long long>(counter(comm, "ops.queued") - queued0),
          o.check ? "true" : "false");
      std::fflush(stdout);
    }
  }
  if (o.check) {
    std::printf("# rank %d: %llu wrong bytes\n", rank, static_cast<unsigned long long>(wrong));
    if (wrong != 0) return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "chorus-engine-bench: operations in flight and isend/irecv latency (under chorusrun)"};
  app.add_option("mode", o.mode, "inflight | pingpong")
      ->required()
      ->check(CLI::IsMember({"inflight", "pingpong"}));
  std::string bytes = "64K", min_bytes = "8", max_bytes = "64K";
  app.add_option("--bytes", bytes, "inflight: bytes per all_reduce (K/M/G suffixes)");
  app.add_option("-k,--ops", o.ops, "inflight: operations per batch")->check(CLI::Range(1, 1024));
  app.add_option("-n,--iters", o.iters, "timed iterations")->check(CLI::Range(1, 1000000));
  app.add_option("-w,--warmup", o.warmup, "untimed iterations")->check(CLI::Range(0, 1000000));
  app.add_option("-b,--minbytes", min_bytes, "pingpong: smallest message (K/M/G suffixes)");
  app.add_option("-e,--maxbytes", max_bytes, "pingpong: largest message (K/M/G suffixes)");
  app.add_flag("-c,--check", o.check, "check every element on every rank");
  app.add_flag("--blocking", o.blocking,
               "pingpong: chorus_send/chorus_recv instead of isend/irecv and wait");
  app.add_flag("--tagged", o.tagged,
               "pingpong: the tagged calls (chorus_isend_tagged ...; with --blocking, "
               "chorus_send_tagged/recv_tagged)");
  app.add_flag("--group", o.group,
               "inflight: also time the K posts inside chorus_group_start/chorus_group_end "
               "(fused up to collectives.fusion_bytes), interleaved with the other two modes");
  app.add_flag("--bucket", o.bucket,
               "inflight: the K inputs (and the K outputs) are slices end to end of one block, "
               "as a gradient bucket; a group then fuses them with no copy");
  app.add_option("--wait-ms", o.wait_ms,
                 "pingpong: chorus_wait's limit (-1: none; with a limit a queued collective "
                 "stays on the progress thread, a point-to-point request is driven until it)");
  CLI11_PARSE(app, argc, argv);
  if (!chorus::bench::parse_size(bytes.c_str(), o.bytes) ||
      !chorus::bench::parse_size(min_bytes.c_str(), o.min_bytes) ||
      !chorus::bench::parse_size(max_bytes.c_str(), o.max_bytes) || o.min_bytes == 0) {
    std::fprintf(stderr,
                 "chorus-engine-bench: a size is not a positive byte count with an optional "
                 "K/M/G suffix (--bytes %s, -b %s, -e %s)\n",
                 bytes.c_str(), min_bytes.c_str(), max_bytes.c_str());
    return 2;
  }

  chorus_options_t opts;
  chorus_options_init(&opts);
  chorus_comm_t* comm = nullptr;
  if (int rc = chorus_comm_init(&opts, &comm); rc != CHORUS_OK) return fail("init", rc);
  int rank = 0, size = 1;
  chorus_comm_rank(comm, &rank);
  chorus_comm_size(comm, &size);
  const int rc =
      o.mode == "inflight" ? run_inflight(comm, rank, size, o) : run_pingpong(comm, rank, size, o);
  std::fflush(stdout);
  chorus_comm_finalize(comm);
  return rc;
}
