// One rank of the first-use connect fault test (tests/faults/first_use_kill.sh):
//   first_use_kill_check VICTIM KILL_DELAY_MS CALL_DELAY_MS TIMEOUT_S
// A communicator whose all_gather is pinned to the mesh and every other
// collective to the ring: at init only the ring neighbours' data endpoints
// are connected (checked by the counters). After a checked ring all_reduce
// and a ring barrier, rank VICTIM waits KILL_DELAY_MS and SIGKILLs itself;
// every other rank waits CALL_DELAY_MS and calls the mesh all_gather, the
// first call that needs every peer connected. That call must fail on every
// survivor, within TIMEOUT_S (timeout.collective) plus 3 s, with a message
// that blames rank VICTIM ("rank V is lost", or a failed connect to it). Each survivor prints
//   first_use: rR failed after T ms: MESSAGE
// and exits 0 only when all of that held.
//   first_use_kill_check VICTIM KILL_DELAY_MS CALL_DELAY_MS TIMEOUT_S broadcast
// makes the first call after the kill a ring broadcast from rank 0 instead
// (VICTIM not a ring neighbour of rank 0). Over tcp and shm the root's
// notice endpoint to the victim connects only then (docs/scale.md, "Notice
// endpoints on first use"), and the root waits for the victim's signature:
// the root must fail as above. Another survivor whose part of the ring
// broadcast does not pass the victim may complete it, with every element
// right (checked); its next call (a barrier) must then fail blaming the
// victim, as above.
#include <chorus/chorus.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

uint64_t counter(const chorus::Communicator& c, const std::string& name) {
  for (auto& [k, v] : c.counters())
    if (k == name) return v;
  return ~uint64_t(0);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const bool bcast = argc == 6 && std::string(argv[5]) == "broadcast";
  if (argc != 5 && !bcast) {
    std::fprintf(stderr,
                 "usage: first_use_kill_check VICTIM KILL_DELAY_MS CALL_DELAY_MS TIMEOUT_S "
                 "[broadcast]\n");
    return 2;
  }
  const int victim = std::atoi(argv[1]);
  const int kill_delay_ms = std::atoi(argv[2]), call_delay_ms = std::atoi(argv[3]);
  const int timeout_s = std::atoi(argv[4]);
  std::vector<std::string> settings = {"timeout.collective=" + std::to_string(timeout_s),
                                       "algorithm.all_gather=\"mesh\""};
  for (const char* c : {"all_reduce", "reduce_scatter", "broadcast", "barrier", "reduce", "gather",
                        "scatter", "all_to_all", "all_to_allv"})
    settings.push_back(std::string("algorithm.") + c + "=\"ring\"");
  std::vector<const char*> ptrs;
  for (const auto& s : settings) ptrs.push_back(s.c_str());
  chorus_options_t o;
  chorus_options_init(&o);
  o.settings = ptrs.data();
  o.settings_count = ptrs.size();
  int rank = -1;
  try {
    chorus::Communicator comm(&o);
    rank = comm.rank();
    const int n = comm.size();
    if (n < 5 || victim <= 0 || victim >= n || (bcast && (victim == 1 || victim == n - 1))) {
      std::printf("r%d FAIL needs 5+ ranks and 0 < VICTIM < size (broadcast: no neighbour of 0)\n",
                  rank);
      return 1;
    }
    // Ring neighbours only, before any call.
    const uint64_t connected = counter(comm, "endpoints.data_connected");
    if (connected != 2) {
      std::printf(
          "r%d FAIL endpoints.data_connected is %llu before the first mesh call, "
          "expected 2\n",
          rank, static_cast<unsigned long long>(connected));
      return 1;
    }
    std::vector<int64_t> in(1001), out(1001, -1);
    for (size_t i = 0; i < in.size(); ++i) in[i] = int64_t(i) * 3 + rank;
    comm.all_reduce(in.data(), out.data(), in.size());
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != int64_t(i) * 3 * n + int64_t(n) * (n - 1) / 2) {
        std::printf("r%d FAIL ring all_reduce element %zu is %lld\n", rank, i,
                    static_cast<long long>(out[i]));
        return 1;
      }
    comm.barrier();
    if (rank == victim) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kill_delay_ms));
      std::raise(SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(call_delay_ms));
    std::vector<int32_t> mine(64, rank), all(64 * size_t(n), -1);
    const auto t0 = std::chrono::steady_clock::now();
    std::string message;
    try {
      if (!bcast) {
        comm.all_gather(mine.data(), all.data(), mine.size());
      } else {
        std::vector<int32_t> buf(4099, rank == 0 ? 0 : -1);
        if (rank == 0)
          for (size_t i = 0; i < buf.size(); ++i) buf[i] = int32_t(i) * 5 + 11;
        comm.broadcast(buf.data(), buf.size(), 0);
        // Completed: only a rank whose part did not need the victim, and
        // then with the root's data.
        for (size_t i = 0; i < buf.size(); ++i)
          if (buf[i] != int32_t(i) * 5 + 11) {
            std::printf("r%d FAIL the broadcast completed with element %zu = %d\n", rank, i,
                        buf[i]);
            return 1;
          }
        if (rank == 0) {
          std::printf("r0 FAIL the root's broadcast completed although rank %d was killed\n",
                      victim);
          return 1;
        }
        std::printf("first_use: r%d completed the broadcast (its part did not pass rank %d)\n",
                    rank, victim);
        comm.barrier();
      }
    } catch (const chorus::Error& e) {
      message = e.what();
    }
    const long long ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    if (message.empty()) {
      std::printf("r%d FAIL the %s succeeded although rank %d was killed\n", rank,
                  bcast ? "barrier after the broadcast" : "mesh all_gather", victim);
      return 1;
    }
    std::printf("first_use: r%d failed after %lld ms: %s\n", rank, ms, message.c_str());
    bool ok = true;
    // Blamed: lost, or the peer whose connect failed (a survivor that was
    // connecting to the victim itself and heard of no loss).
    const std::string v = "rank " + std::to_string(victim);
    if (message.find(v + " is lost") == std::string::npos &&
        message.find("connecting to " + v + " ") == std::string::npos) {
      std::printf("r%d FAIL the error does not blame rank %d\n", rank, victim);
      ok = false;
    }
    if (ms > (timeout_s + 3) * 1000LL) {
      std::printf("r%d FAIL the call took %lld ms, more than timeout.collective + 3 s\n", rank, ms);
      ok = false;
    }
    return ok ? 0 : 1;
  } catch (const chorus::Error& e) {
    std::printf("r%d FAIL before the mesh call: %s\n", rank, e.what());
    return 1;
  }
}
