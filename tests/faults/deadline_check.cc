// Deadlines and abort, on 2 ranks (run through chorusrun -n 2):
//   timeout: rank 1 arrives late; rank 0's all_reduce must fail with
//            CHORUS_ERR_TIMEOUT after timeout.collective, naming rank 1, and the
//            communicator must then refuse further calls at once.
//   abort:   rank 1 arrives late; another thread of rank 0 calls
//            chorus_comm_abort, and the blocked all_reduce returns ABORTED.
//
// "Late" is an order, not a sleep: rank 1 joins the all_reduce only once rank
// 0's call has returned (a file rank 0 creates, see Signal), so on a loaded
// host rank 1 can never arrive in time by accident. The verdicts are orders
// too: a deadline does not fire before it is due, ABORTED comes only from the
// abort; upper bounds are hang guards at 10x what an idle host needs.
#include <chorus/chorus.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

int g_failed = 0;
int g_passed = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  ok ? ++g_passed : ++g_failed;
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// A one-shot flag between the two ranks of this job: a file in the temporary
/// directory named after the job's coordinator address, which chorusrun
/// picks afresh for every job.
class Signal {
 public:
  explicit Signal(const std::string& mode) {
    std::string job = std::getenv("CHORUS_COORDINATOR") ? std::getenv("CHORUS_COORDINATOR") : "";
    for (char& c : job)
      if (c == ':' || c == '/' || c == '[' || c == ']') c = '_';
    path_ = std::filesystem::temp_directory_path() / ("chorus-deadline-check." + mode + "." + job);
  }
  /// Rank 0, before init (which rank 1 cannot pass without it): no stale flag.
  void clear() const { std::filesystem::remove(path_); }
  void raise() const { std::ofstream(path_) << "done\n"; }
  /// Blocks until raise(), or `limit` as a hang guard; consumes the flag.
  bool await(std::chrono::seconds limit) const {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!std::filesystem::exists(path_)) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::filesystem::remove(path_);
    return true;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "timeout";
  constexpr double kTimeoutS = 1.5;  // timeout.collective of the timeout mode
  // In the abort mode the deadline is far away, so only the abort can end
  // the call however late the aborting thread runs.
  const char* settings[] = {
      mode == "timeout" ? "timeout.collective = 1.5" : "timeout.collective = 50",
      "log.level = \"error\""};
  const Signal rank0_returned(mode);
  const char* rank_env = std::getenv("CHORUS_RANK");
  if (rank_env && std::string(rank_env) == "0") rank0_returned.clear();
  chorus_options_t opts;
  chorus_options_init(&opts);
  opts.settings = settings;
  opts.settings_count = 2;
  chorus_comm_t* comm = nullptr;
  if (chorus_comm_init(&opts, &comm) != CHORUS_OK) {
    std::fprintf(stderr, "init: %s\n", chorus_last_error());
    return 1;
  }
  int rank = 0;
  chorus_comm_rank(comm, &rank);
  std::vector<float> x(1000, 1.0f);
  if (rank == 1) {
    expect(rank0_returned.await(std::chrono::seconds(40)), "rank 0's all_reduce returned");
    int rc = chorus_all_reduce(comm, x.data(), x.data(), x.size(), CHORUS_FLOAT32, CHORUS_SUM);
    // The late rank either fails, or, when everything it needs had already
    // arrived (the one-shot mesh sends whole inputs up front), holds the
    // exact result. Never a wrong one.
    bool exact = true;
    for (float v : x) exact = exact && v == 2.0f;
    expect(rc != CHORUS_OK || exact, std::string("late rank gets an error or the exact result: ") +
                                         chorus_status_name(rc) + ": " + chorus_last_error());
  } else if (mode == "timeout") {
    auto t0 = std::chrono::steady_clock::now();
    int rc = chorus_all_reduce(comm, x.data(), x.data(), x.size(), CHORUS_FLOAT32, CHORUS_SUM);
    double took = since(t0);
    std::string msg = chorus_last_error();
    rank0_returned.raise();
    expect(rc == CHORUS_ERR_TIMEOUT,
           "all_reduce times out: " + std::string(chorus_status_name(rc)) + ": " + msg);
    expect(took >= kTimeoutS * 0.95 && took < 10 * kTimeoutS,
           "not before timeout.collective, and no hang (" + std::to_string(took) + " s)");
    expect(msg.find("rank(s) 1") != std::string::npos, "the message names rank 1");
    t0 = std::chrono::steady_clock::now();
    rc = chorus_all_reduce(comm, x.data(), x.data(), x.size(), CHORUS_FLOAT32, CHORUS_SUM);
    // "At once": without waiting out another timeout.collective.
    expect(rc == CHORUS_ERR_TIMEOUT && std::strstr(chorus_last_error(), "failed earlier") &&
               since(t0) < kTimeoutS,
           std::string("later calls are refused at once: ") + chorus_last_error());
  } else {
    std::atomic<bool> aborted{false};
    std::chrono::steady_clock::time_point t_abort;
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      t_abort = std::chrono::steady_clock::now();
      aborted = true;
      chorus_comm_abort(comm);
    });
    int rc = chorus_all_reduce(comm, x.data(), x.data(), x.size(), CHORUS_FLOAT32, CHORUS_SUM);
    const bool after_abort = aborted;
    aborter.join();
    const double took = since(t_abort);
    rank0_returned.raise();
    expect(rc == CHORUS_ERR_ABORTED,
           std::string("all_reduce returns ABORTED: ") + chorus_last_error());
    expect(after_abort, "it returned only after chorus_comm_abort was called");
    expect(took < 5.0, "and promptly, long before timeout.collective (" + std::to_string(took) +
                           " s after the abort)");
  }
  auto t0 = std::chrono::steady_clock::now();
  chorus_comm_finalize(comm);
  const double took = since(t0);
  expect(took < 20.0, "finalize does not hang (" + std::to_string(took) + " s)");
  std::printf("deadline_check %s rank %d: %d passed, %d failed\n", mode.c_str(), rank, g_passed,
              g_failed);
  return g_failed == 0 ? 0 : 1;
}
