// A job that intruders try to disturb (tests/security/intrusion.sh). Run
// under chorusrun; argv[1] is a folder shared with the test script, or "-"
// for a plain run (one checked all_reduce, then exit).
//
// With a folder: rank 0 writes its coordinator address to <dir>/coordinator
// before init; the last rank waits for <dir>/go1 before it starts, so the
// coordinator is still accepting while the script attacks it. After init rank
// 0 writes <dir>/ready and every rank runs checked all_reduces until rank 0
// sees <dir>/go2 (the stop decision travels inside the all_reduce, so every
// rank stops after the same call). Exit 0 only if every result was exact.
#include <chorus/chorus.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

bool exists(const std::string& path) { return std::ifstream(path).good(); }

bool wait_for(const std::string& path, int seconds) {
  for (int i = 0; i < seconds * 20; ++i) {
    if (exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "-";
  const bool gated = dir != "-";
  const int my_rank = env_int("CHORUS_RANK");
  const int world = env_int("CHORUS_WORLD_SIZE");
  if (gated && my_rank == 0) {
    const char* coordinator = std::getenv("CHORUS_COORDINATOR");
    std::ofstream(dir + "/coordinator.tmp") << (coordinator != nullptr ? coordinator : "") << "\n";
    std::rename((dir + "/coordinator.tmp").c_str(), (dir + "/coordinator").c_str());
  }
  if (gated && my_rank == world - 1 && !wait_for(dir + "/go1", 60)) {
    std::fprintf(stderr, "victim: go1 never appeared\n");
    return 3;
  }

  chorus_options_t opts;
  chorus_options_init(&opts);
  chorus_comm_t* comm = nullptr;
  if (chorus_comm_init(&opts, &comm) != CHORUS_OK) {
    std::fprintf(stderr, "victim: init failed: %s\n", chorus_last_error());
    return 1;
  }
  int rank = 0, size = 0;
  chorus_comm_rank(comm, &rank);
  chorus_comm_size(comm, &size);
  if (gated && rank == 0) std::ofstream(dir + "/ready") << "ready\n";

  constexpr std::size_t kCount = 4097;  // the last element carries the stop flag
  constexpr std::int64_t kStop = std::int64_t{1} << 40;
  std::vector<std::int64_t> x(kCount);
  int calls = 0;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const bool stop_here = !gated || (rank == 0 && exists(dir + "/go2")) ||
                           std::chrono::steady_clock::now() - start > std::chrono::seconds(90);
    for (std::size_t i = 0; i + 1 < kCount; ++i) x[i] = rank * 1000 + std::int64_t(i) + calls;
    x[kCount - 1] = stop_here ? kStop : 0;
    const int rc = chorus_all_reduce(comm, x.data(), x.data(), kCount, CHORUS_INT64, CHORUS_SUM);
    if (rc != CHORUS_OK) {
      std::fprintf(stderr, "victim rank %d: all_reduce #%d failed: %s\n", rank, calls,
                   chorus_last_error());
      return 1;
    }
    const std::int64_t ranks = std::int64_t(size) * (size - 1) / 2;
    for (std::size_t i = 0; i + 1 < kCount; ++i) {
      const std::int64_t want = 1000 * ranks + std::int64_t(size) * (std::int64_t(i) + calls);
      if (x[i] != want) {
        std::fprintf(stderr, "victim rank %d: all_reduce #%d element %zu is %lld, want %lld\n",
                     rank, calls, i, static_cast<long long>(x[i]), static_cast<long long>(want));
        return 2;
      }
    }
    ++calls;
    if (x[kCount - 1] >= kStop) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf("victim rank %d: %d all_reduces exact\n", rank, calls);
  chorus_comm_finalize(comm);
  return 0;
}
