// One rank of the tagged point-to-point first-use fault test (run by
// tests/faults/first_use_kill.sh, which starts the ranks by hand):
//   p2p_first_use_kill_check VICTIM KILL_DELAY_MS CALL_DELAY_MS TIMEOUT_S
// A ring-only communicator with tagged point-to-point on: over tcp (and verbs) no
// tagged pair is connected at init (endpoints.p2p_connected = 0, checked).
// After a checked ring all_reduce and a barrier, rank VICTIM waits
// KILL_DELAY_MS and SIGKILLs itself, before any tagged traffic to it. Every
// other rank waits CALL_DELAY_MS and sends the victim a tagged message (the
// first use of that pair: ranks below the victim ask it to dial, ranks
// above dial it). The send must fail within TIMEOUT_S (timeout.collective)
// plus 3 s with PEER_LOST or TIMEOUT naming the victim; a receive from the
// victim then fails too. Each survivor prints
//   first_use: rR send_tagged failed after T ms: MESSAGE
// and exits 0 only when all of that held.
#include <chorus/chorus.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
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
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: p2p_first_use_kill_check VICTIM KILL_DELAY_MS CALL_DELAY_MS TIMEOUT_S\n");
    return 2;
  }
  const int victim = std::atoi(argv[1]);
  const int kill_delay_ms = std::atoi(argv[2]), call_delay_ms = std::atoi(argv[3]);
  const int timeout_s = std::atoi(argv[4]);
  std::vector<std::string> settings = {"timeout.collective=" + std::to_string(timeout_s),
                                       "point_to_point.tagged=true"};
  for (const char* c : {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier",
                        "reduce", "gather", "scatter", "all_to_all", "all_to_allv"})
    settings.push_back(std::string("algorithm.") + c + "=\"ring\"");
  std::vector<const char*> ptrs;
  for (const auto& s : settings) ptrs.push_back(s.c_str());
  chorus_options_t o;
  chorus_options_init(&o);
  o.settings = ptrs.data();
  o.settings_count = ptrs.size();
  const char* transport = std::getenv("CHORUS_TRANSPORT");
  // Transports with polled connects (CHORUS_TP_CAP_CONNECT_POLL) connect no
  // tagged pair at init; CI runs this over tcp, and over verbs in the
  // soft-RoCE guest.
  const bool lazy = transport != nullptr &&
                    (std::string(transport) == "tcp" || std::string(transport) == "verbs");
  int rank = -1;
  try {
    chorus::Communicator comm(&o);
    rank = comm.rank();
    const int n = comm.size();
    if (n < 5 || victim <= 0 || victim >= n - 1) {
      std::printf("r%d FAIL needs 5+ ranks and 0 < VICTIM < size - 1\n", rank);
      return 1;
    }
    const uint64_t pairs = counter(comm, "endpoints.p2p_connected");
    if (pairs != (lazy ? 0 : uint64_t(n - 1))) {
      std::printf("r%d FAIL endpoints.p2p_connected is %llu after init, expected %d\n", rank,
                  static_cast<unsigned long long>(pairs), lazy ? 0 : n - 1);
      return 1;
    }
    std::vector<int64_t> in(1001), out(1001, -1);
    for (size_t i = 0; i < in.size(); ++i) in[i] = int64_t(i) * 5 + rank;
    comm.all_reduce(in.data(), out.data(), in.size());
    for (size_t i = 0; i < out.size(); ++i)
      if (out[i] != int64_t(i) * 5 * n + int64_t(n) * (n - 1) / 2) {
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
    std::vector<int32_t> msg(100, rank);
    const auto t0 = std::chrono::steady_clock::now();
    const int rc =
        chorus_send_tagged(comm.handle(), msg.data(), msg.size(), CHORUS_INT32, victim, 7);
    const std::string message = rc == CHORUS_OK ? "" : chorus_last_error();
    const long long ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    if (rc == CHORUS_OK) {
      std::printf("r%d FAIL send_tagged to rank %d succeeded although it was killed\n", rank,
                  victim);
      return 1;
    }
    std::printf("first_use: r%d send_tagged failed after %lld ms: %s: %s\n", rank, ms,
                chorus_status_name(rc), message.c_str());
    bool ok = true;
    if (rc != CHORUS_ERR_PEER_LOST && rc != CHORUS_ERR_TIMEOUT) {
      std::printf("r%d FAIL status %s, expected PEER_LOST or TIMEOUT\n", rank,
                  chorus_status_name(rc));
      ok = false;
    }
    if (message.find("rank " + std::to_string(victim) + " ") == std::string::npos) {
      std::printf("r%d FAIL the error does not name rank %d\n", rank, victim);
      ok = false;
    }
    if (ms > (timeout_s + 3) * 1000LL) {
      std::printf("r%d FAIL the send took %lld ms, more than timeout.collective + 3 s\n", rank, ms);
      ok = false;
    }
    // The pair is gone: a receive from the victim fails too, without waiting.
    std::vector<int32_t> back(100, -1);
    chorus_p2p_status_t st;
    const int rrc =
        chorus_recv_tagged(comm.handle(), back.data(), back.size(), CHORUS_INT32, victim, 7, &st);
    if (rrc == CHORUS_OK) {
      std::printf("r%d FAIL recv_tagged from the killed rank %d succeeded\n", rank, victim);
      ok = false;
    }
    for (int32_t v : back)
      if (v != -1) {
        std::printf("r%d FAIL the failed receive wrote into its buffer\n", rank);
        ok = false;
        break;
      }
    return ok ? 0 : 1;
  } catch (const chorus::Error& e) {
    std::printf("r%d FAIL before the tagged send: %s\n", rank, e.what());
    return 1;
  }
}
