// Ranks as threads: starts N threads in this one process, each a rank of an
// N-rank communicator over the loopback transport, made through the public
// C API exactly as separate processes would make it. Every rank runs
// all_reduce, all_gather, reduce_scatter, broadcast and barrier with the
// ring and then the mesh algorithm, and checks every element of its result
// against a reference computed here from the inputs alone.
//
// usage: loopback_ranks N RING_HOST:PORT MESH_HOST:PORT
//   N               ranks (threads), 1 or more
//   RING_HOST:PORT  where rank 0's bootstrap listens for the ring communicator
//   MESH_HOST:PORT  the same for the mesh communicator; a different free port,
//                   because a fast rank may join the second job while rank 0
//                   still serves the first one on its port
// The transport plugin is found through CHORUS_PLUGIN_PATH like any other.
// Exits 0 when every rank checked every element; prints each failure.
#include <chorus/chorus.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

// Element counts: 1, one that divides nothing, and one spanning several
// staging slots (the default slot is 256 KiB: 300000 int32 is ~1.2 MB).
constexpr std::size_t kCounts[] = {1, 4099, 300000};
constexpr const char* kAlgorithms[] = {"ring", "mesh"};
constexpr const char* kCollectives[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                        "barrier"};

std::mutex g_report_mutex;

void report(int rank, const std::string& what) {
  std::lock_guard<std::mutex> lock(g_report_mutex);
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
}

/// Rank r's input element i: distinct per rank and index, small enough that
/// a sum over any rank count stays exact in int32.
std::int32_t input(int rank, std::size_t i) {
  return static_cast<std::int32_t>((rank + 1) * 1000 + static_cast<std::int32_t>(i % 997));
}

/// Counts mismatches of `got` against `want`, reporting the first.
std::size_t compare(int rank, const std::string& what, const std::vector<std::int32_t>& got,
                    const std::vector<std::int32_t>& want) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (wrong++ == 0) {
      report(rank, what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) +
                       ", expected " + std::to_string(want[i]));
    }
  }
  if (wrong > 0) report(rank, what + ": " + std::to_string(wrong) + " wrong elements");
  return wrong;
}

/// One rank: a communicator per algorithm, every collective at every count.
/// Returns the number of failed checks.
int run_rank(int rank, int size, const char* const coordinators[], const std::string& token) {
  int failures = 0;
  for (std::size_t a = 0; a < std::size(kAlgorithms); ++a) {
    const char* algorithm = kAlgorithms[a];
    const char* coordinator = coordinators[a];
    // Every wait has a deadline: joining, and each collective.
    std::vector<std::string> settings = {"transport.name=\"loopback\"", "timeout.init=60",
                                         "timeout.collective=120",
                                         "bootstrap.job_token=\"" + token + "\""};
    for (const char* coll : kCollectives) {
      settings.push_back(std::string("algorithm.") + coll + "=\"" + algorithm + "\"");
    }
    std::vector<const char*> settings_c;
    for (const auto& s : settings) settings_c.push_back(s.c_str());
    chorus_options_t opts;
    chorus_options_init(&opts);
    opts.rank = rank;
    opts.size = size;
    opts.coordinator = coordinator;
    opts.settings = settings_c.data();
    opts.settings_count = settings_c.size();
    chorus_comm_t* comm = nullptr;
    if (chorus_comm_init(&opts, &comm) != CHORUS_OK) {
      report(rank, std::string("chorus_comm_init (") + algorithm + "): " + chorus_last_error());
      return failures + 1;
    }
    const std::string transport = chorus_comm_transport(comm);
    if (transport != "loopback") {
      report(rank, "the communicator runs over '" + transport + "', not loopback");
      ++failures;
    }
    for (int coll = CHORUS_COLL_ALL_REDUCE; coll <= CHORUS_COLL_BARRIER; ++coll) {
      const char* chosen = chorus_comm_algorithm(comm, coll, 4096);
      if (chosen == nullptr || std::string(chosen) != algorithm) {
        report(rank, std::string(kCollectives[coll]) + " runs '" + (chosen ? chosen : "(none)") +
                         "', not the pinned " + algorithm);
        ++failures;
      }
    }
    const auto call = [&](const std::string& what, int rc) {
      if (rc == CHORUS_OK) return true;
      report(rank, what + " failed: " + chorus_last_error());
      ++failures;
      return false;
    };
    for (const std::size_t n : kCounts) {
      const std::string tag = std::string(algorithm) + " count " + std::to_string(n);
      const auto un = static_cast<std::size_t>(size);
      std::vector<std::int32_t> in(n * un), out(n * un), want(n * un);
      for (std::size_t i = 0; i < n * un; ++i) in[i] = input(rank, i);

      // all_reduce, sum: the reference adds every rank's input.
      for (std::size_t i = 0; i < n; ++i) {
        std::int32_t sum = 0;
        for (int r = 0; r < size; ++r) sum += input(r, i);
        want[i] = sum;
      }
      std::vector<std::int32_t> got(n);
      if (call("all_reduce " + tag,
               chorus_all_reduce(comm, in.data(), got.data(), n, CHORUS_INT32, CHORUS_SUM))) {
        failures += compare(rank, "all_reduce " + tag, got,
                            std::vector<std::int32_t>(want.begin(), want.begin() + long(n))) > 0;
      }

      // all_gather: block r is rank r's first n inputs.
      for (int r = 0; r < size; ++r) {
        for (std::size_t i = 0; i < n; ++i) want[std::size_t(r) * n + i] = input(r, i);
      }
      if (call("all_gather " + tag,
               chorus_all_gather(comm, in.data(), out.data(), n, CHORUS_INT32))) {
        failures += compare(rank, "all_gather " + tag, out, want) > 0;
      }

      // reduce_scatter, max: this rank gets block `rank` of the elementwise
      // max over every rank's size*n inputs.
      std::vector<std::int32_t> block_want(n);
      for (std::size_t i = 0; i < n; ++i) {
        std::int32_t best = input(0, std::size_t(rank) * n + i);
        for (int r = 1; r < size; ++r) best = std::max(best, input(r, std::size_t(rank) * n + i));
        block_want[i] = best;
      }
      if (call("reduce_scatter " + tag,
               chorus_reduce_scatter(comm, in.data(), got.data(), n, CHORUS_INT32, CHORUS_MAX))) {
        failures += compare(rank, "reduce_scatter " + tag, got, block_want) > 0;
      }

      // broadcast from the last rank: everyone ends with its inputs.
      const int root = size - 1;
      std::vector<std::int32_t> buf(n), root_in(n);
      for (std::size_t i = 0; i < n; ++i) {
        root_in[i] = input(root, i);
        buf[i] = rank == root ? root_in[i] : -1;
      }
      if (call("broadcast " + tag, chorus_broadcast(comm, buf.data(), n, CHORUS_INT32, root))) {
        failures += compare(rank, "broadcast " + tag, buf, root_in) > 0;
      }

      call("barrier " + tag, chorus_barrier(comm));
    }
    if (chorus_comm_finalize(comm) != CHORUS_OK) {
      report(rank, std::string("chorus_comm_finalize: ") + chorus_last_error());
      ++failures;
    }
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 || std::atoi(argv[1]) < 1) {
    std::fprintf(stderr, "usage: %s N RING_HOST:PORT MESH_HOST:PORT\n", argv[0]);
    return 2;
  }
  const int size = std::atoi(argv[1]);
  const char* const coordinators[] = {argv[2], argv[3]};
  // The job token admits only this job's ranks to the bootstrap; all ranks
  // are in this process, so any value unique to the run will do.
  const std::string token =
      "loopback-ranks-" + std::to_string(::getpid()) + "-" +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  std::atomic<int> failures{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] { failures += run_rank(r, size, coordinators, token); });
  }
  for (auto& t : ranks) t.join();
  const int checks = size * int(std::size(kAlgorithms)) * int(std::size(kCounts)) * 4;
  std::printf("loopback_ranks: %d ranks as threads, %d element-checked results, %d failures\n",
              size, checks, failures.load());
  return failures == 0 ? 0 : 1;
}
