// The call-signature check (docs/reliability.md §4.5), on N ranks through
// chorusrun. Every case runs on a fresh child of one world communicator
// (chorus_comm_split), so a mismatch breaks only that child.
//
//   mismatch_check matrix [-a ALGORITHM] [--large]
//       One rank (the "deviant", rank 2, or the last rank with fewer than 3)
//       calls something else than the others: another op, dtype, root,
//       count, or collective; and a send/recv pair with different sizes.
//       Every rank must get CHORUS_ERR_MISMATCH, never OK or another status,
//       with a message naming the deviant's call and a normal call. The
//       collective timeout is 60 s and the test's own limit is lower, so a
//       rank that waited for its deadline fails the test.
//   mismatch_check matched [-a ALGORITHM]
//       A matched sequence of every collective and of send/recv (both
//       orders, and both ranks sending first) passes, every element checked,
//       with check.signatures as configured (run with the check on and off).
//   mismatch_check stop
//       Rank 2 (of 4 or more) stops itself with SIGSTOP before an all_reduce;
//       timeout.collective = 2 s. Every other rank must get CHORUS_ERR_TIMEOUT
//       naming rank 2 as silent, and none may call a rank lost. Rank 0 then
//       continues rank 2 (SIGCONT) so that the job ends.
#include <chorus/chorus.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

int g_rank = 0;
int g_size = 1;
int g_passed = 0;
int g_failed = 0;

void report(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else {
    ++g_failed;
    std::fprintf(stderr, "FAIL rank %d: %s\n", g_rank, what.c_str());
  }
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// One mismatch case: `normal` is what every rank but the deviant calls,
/// `deviant` what the deviant calls; the descriptions are how the message
/// must name them.
struct Case {
  std::string name;
  std::function<int(chorus_comm_t*)> normal, deviant;
  std::string normal_desc, deviant_desc;
};

int g_deviant = 0;

/// Runs `c` on a fresh child and checks every rank's verdict.
void run_case(chorus_comm_t* world, const Case& c) {
  chorus_comm_t* comm = nullptr;
  int rc = chorus_comm_split(world, 0, g_rank, &comm);
  report(rc == CHORUS_OK, c.name + ": split: " + chorus_last_error());
  if (rc != CHORUS_OK) return;
  // A matched call first: the check passes what agrees.
  std::vector<float> warm(64, float(g_rank + 1));
  rc = chorus_all_reduce(comm, warm.data(), warm.data(), warm.size(), CHORUS_FLOAT32, CHORUS_SUM);
  const float want = float(g_size * (g_size + 1) / 2);
  bool exact = rc == CHORUS_OK;
  for (float v : warm) exact = exact && v == want;
  report(exact, c.name + ": the matched all_reduce before it is exact: " + chorus_status_name(rc) +
                    ": " + chorus_last_error());
  const bool me_deviant = g_rank == g_deviant;
  const auto t0 = std::chrono::steady_clock::now();
  rc = me_deviant ? c.deviant(comm) : c.normal(comm);
  std::string msg = rc == CHORUS_OK ? "" : chorus_last_error();
  if (rc == CHORUS_OK && c.name.rfind("send_recv", 0) == 0) {
    // A send returns without waiting for its receiver (docs/reliability.md
    // §4.5): the sender learns of the mismatch in its next call.
    rc = chorus_barrier(comm);
    msg = chorus_last_error();
  }
  // Informational (docs/reliability.md §4.5 quotes it); no verdict on time.
  std::printf(
      "case %s: rank %d: %s after %.1f ms\n", c.name.c_str(), g_rank, chorus_status_name(rc),
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  report(rc == CHORUS_ERR_MISMATCH,
         c.name + ": status is CHORUS_ERR_MISMATCH, got " + chorus_status_name(rc) + ": " + msg);
  if (rc == CHORUS_ERR_MISMATCH) {
    report(contains(msg, "rank " + std::to_string(g_deviant) + " called " + c.deviant_desc),
           c.name + ": the message names rank " + std::to_string(g_deviant) + "'s call " +
               c.deviant_desc + ": " + msg);
    report(contains(msg, " called " + c.normal_desc),
           c.name + ": the message names the other call " + c.normal_desc + ": " + msg);
    rc = chorus_barrier(comm);
    report(rc == CHORUS_ERR_MISMATCH,
           c.name + ": the communicator refuses later calls: " + chorus_status_name(rc));
  }
  chorus_comm_finalize(comm);
  // The world communicator is healthy: every rank has finished the case.
  rc = chorus_barrier(world);
  report(rc == CHORUS_OK, c.name + ": world barrier after the case: " + chorus_last_error());
}

std::string count_desc(const char* coll, size_t count, const char* dtype, const char* op) {
  std::string s = std::string(coll) + "(count=" + std::to_string(count) + ", " + dtype;
  if (op) s += std::string(", ") + op;
  return s + ")";
}

int matrix(chorus_comm_t* world, bool large) {
  // Small: 4 KiB of float32 (the mesh's one-shot sizes); large: 4 MiB (the
  // ring's pipelined sizes).
  const size_t n = (large ? (4u << 20) : 4096u) / 4;
  g_deviant = g_size > 2 ? 2 : g_size - 1;
  std::vector<float> in(n * size_t(g_size), 1.0f), out(n * size_t(g_size));
  std::vector<Case> cases;
  auto ar = [&](size_t count, int dtype, int op) {
    return [&, count, dtype, op](chorus_comm_t* c) {
      return chorus_all_reduce(c, in.data(), out.data(), count, dtype, op);
    };
  };
  const std::string ar_desc = count_desc("all_reduce", n, "float32", "sum");
  cases.push_back({"op", ar(n, CHORUS_FLOAT32, CHORUS_SUM), ar(n, CHORUS_FLOAT32, CHORUS_MAX),
                   ar_desc, count_desc("all_reduce", n, "float32", "max")});
  cases.push_back({"dtype", ar(n, CHORUS_FLOAT32, CHORUS_SUM), ar(n, CHORUS_INT32, CHORUS_SUM),
                   ar_desc, count_desc("all_reduce", n, "int32", "sum")});
  cases.push_back({"count", ar(n, CHORUS_FLOAT32, CHORUS_SUM),
                   ar(n / 2, CHORUS_FLOAT32, CHORUS_SUM), ar_desc,
                   count_desc("all_reduce", n / 2, "float32", "sum")});
  auto bc = [&](int root) {
    return [&, root](chorus_comm_t* c) {
      return chorus_broadcast(c, out.data(), n, CHORUS_FLOAT32, root);
    };
  };
  cases.push_back({"root", bc(0), bc(1),
                   "broadcast(count=" + std::to_string(n) + ", float32, root=0)",
                   "broadcast(count=" + std::to_string(n) + ", float32, root=1)"});
  cases.push_back({"collective_all_gather", ar(n, CHORUS_FLOAT32, CHORUS_SUM),
                   [&](chorus_comm_t* c) {
                     return chorus_all_gather(c, in.data(), out.data(), n, CHORUS_UINT8);
                   },
                   ar_desc, count_desc("all_gather", n, "uint8", nullptr)});
  cases.push_back({"collective_broadcast", ar(n, CHORUS_FLOAT32, CHORUS_SUM), bc(0), ar_desc,
                   "broadcast(count=" + std::to_string(n) + ", float32, root=0)"});
  cases.push_back({"collective_barrier", ar(n, CHORUS_FLOAT32, CHORUS_SUM),
                   [](chorus_comm_t* c) { return chorus_barrier(c); }, ar_desc, "barrier()"});
  // Send/recv of different sizes between the deviant (receiving half) and
  // rank 0 (sending); the other ranks do the same pair the matching way
  // round among themselves where they can, else nothing that is checked.
  if (g_size >= 2) {
    const size_t bytes = n * 4;
    const int sender = g_deviant == 0 ? 1 : 0;
    auto pair = [&, sender](bool deviant) {
      return [&, sender, deviant](chorus_comm_t* c) -> int {
        if (g_rank == sender) return chorus_send(c, in.data(), n, CHORUS_FLOAT32, g_deviant);
        if (deviant) return chorus_recv(c, out.data(), n / 2, CHORUS_FLOAT32, sender);
        // Ranks outside the pair are told by the notices: their next call fails.
        return chorus_barrier(c);
      };
    };
    Case c{
        "send_recv_size", pair(false), pair(true),
        "send(" + std::to_string(bytes) + " bytes to rank " + std::to_string(g_deviant) + ")",
        "recv(" + std::to_string(bytes / 2) + " bytes from rank " + std::to_string(sender) + ")"};
    cases.push_back(c);
  }
  for (const auto& c : cases) run_case(world, c);
  return 0;
}

/// A matched sequence of every collective and of send/recv, element by
/// element against values computed here.
void matched(chorus_comm_t* comm) {
  for (size_t n : {size_t(0), size_t(1), size_t(1000), size_t(300000)}) {
    const std::string at = " count=" + std::to_string(n);
    std::vector<int32_t> in(n * size_t(g_size)), out(n * size_t(g_size));
    for (size_t i = 0; i < in.size(); ++i) in[i] = int32_t(i % 1000) + g_rank;
    int rc = chorus_all_reduce(comm, in.data(), out.data(), n, CHORUS_INT32, CHORUS_SUM);
    bool ok = rc == CHORUS_OK;
    for (size_t i = 0; ok && i < n; ++i)
      ok = out[i] == int32_t(i % 1000) * g_size + g_size * (g_size - 1) / 2;
    report(ok, "all_reduce" + at + ": " + chorus_last_error());
    rc = chorus_all_gather(comm, in.data(), out.data(), n, CHORUS_INT32);
    ok = rc == CHORUS_OK;
    for (int r = 0; ok && r < g_size; ++r)
      for (size_t i = 0; ok && i < n; ++i) ok = out[size_t(r) * n + i] == int32_t(i % 1000) + r;
    report(ok, "all_gather" + at + ": " + chorus_last_error());
    rc = chorus_reduce_scatter(comm, in.data(), out.data(), n, CHORUS_INT32, CHORUS_MAX);
    ok = rc == CHORUS_OK;
    for (size_t i = 0; ok && i < n; ++i)
      ok = out[i] == int32_t((size_t(g_rank) * n + i) % 1000) + g_size - 1;
    report(ok, "reduce_scatter" + at + ": " + chorus_last_error());
    const int root = int(n % size_t(g_size));
    std::vector<int32_t> buf(n);
    for (size_t i = 0; i < n; ++i) buf[i] = g_rank == root ? int32_t(i) : -1;
    rc = chorus_broadcast(comm, buf.data(), n, CHORUS_INT32, root);
    ok = rc == CHORUS_OK;
    for (size_t i = 0; ok && i < n; ++i) ok = buf[i] == int32_t(i);
    report(ok, "broadcast" + at + ": " + chorus_last_error());
    report(chorus_barrier(comm) == CHORUS_OK, "barrier: " + std::string(chorus_last_error()));
    if (g_size < 2) continue;
    // Ring exchange, one side receiving first, then both sending first
    // (small counts only: a send is eager up to the transport's buffering).
    const int right = (g_rank + 1) % g_size, left = (g_rank + g_size - 1) % g_size;
    for (int pattern = 0; pattern < (n <= 1000 ? 2 : 1); ++pattern) {
      std::vector<int32_t> got(n, -1);
      if (pattern == 0 && g_rank % 2 == 0) {
        rc = chorus_send(comm, in.data(), n, CHORUS_INT32, right);
        if (rc == CHORUS_OK) rc = chorus_recv(comm, got.data(), n, CHORUS_INT32, left);
      } else if (pattern == 0) {
        rc = chorus_recv(comm, got.data(), n, CHORUS_INT32, left);
        if (rc == CHORUS_OK) rc = chorus_send(comm, in.data(), n, CHORUS_INT32, right);
      } else {
        rc = chorus_send(comm, in.data(), n, CHORUS_INT32, right);
        if (rc == CHORUS_OK) rc = chorus_recv(comm, got.data(), n, CHORUS_INT32, left);
      }
      ok = rc == CHORUS_OK;
      for (size_t i = 0; ok && i < n; ++i) ok = got[i] == int32_t(i % 1000) + left;
      report(ok, "send/recv pattern " + std::to_string(pattern) + at + ": " +
                     chorus_status_name(rc) + ": " + chorus_last_error());
    }
  }
}

void stop(chorus_comm_t* comm) {
  const int stopped = 2;
  int32_t pid = int32_t(getpid());
  std::vector<int32_t> pids(static_cast<size_t>(g_size));
  int rc = chorus_all_gather(comm, &pid, pids.data(), 1, CHORUS_INT32);
  report(rc == CHORUS_OK, "gathering the pids");
  std::vector<float> x(1000, 1.0f);
  rc = chorus_all_reduce(comm, x.data(), x.data(), x.size(), CHORUS_FLOAT32, CHORUS_SUM);
  report(rc == CHORUS_OK, "a first all_reduce");
  if (g_rank == stopped) {
    raise(SIGSTOP);
    // Continued once the others have their verdicts: this rank's call fails
    // one way or another; only that it is not OK is checked.
    rc = chorus_all_reduce(comm, x.data(), x.data(), x.size(), CHORUS_FLOAT32, CHORUS_SUM);
    report(rc != CHORUS_OK,
           std::string("the stopped rank's call fails after SIGCONT: ") + chorus_status_name(rc));
    return;
  }
  rc = chorus_all_reduce(comm, x.data(), x.data(), x.size(), CHORUS_FLOAT32, CHORUS_SUM);
  std::string msg = chorus_last_error();
  std::printf("rank %d: %s: %s\n", g_rank, chorus_status_name(rc), msg.c_str());
  report(rc == CHORUS_ERR_TIMEOUT,
         std::string("status is CHORUS_ERR_TIMEOUT: ") + chorus_status_name(rc) + ": " + msg);
  report(contains(msg, "rank(s) " + std::to_string(stopped) + " sent no word"),
         "the message names the stopped rank " + std::to_string(stopped) + ": " + msg);
  report(!contains(msg, "is lost") && !contains(msg, "lost rank") && !contains(msg, "losing"),
         "no rank is called lost: " + msg);
  if (g_rank == 0) {
    // Every survivor has its verdict once its own has arrived plus the
    // notice grace; continue the stopped rank after that.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    kill(pid_t(pids[stopped]), SIGCONT);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "matrix";
  std::string algorithm;
  bool large = false;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-a" && i + 1 < argc)
      algorithm = argv[++i];
    else if (a == "--large")
      large = true;
  }
  std::vector<std::string> settings = {mode == "stop" ? "timeout.collective = 2"
                                                      : "timeout.collective = 60"};
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
  if (mode == "matrix") {
    matrix(comm, large);
  } else if (mode == "matched") {
    matched(comm);
  } else if (mode == "stop") {
    if (g_size < 4) {
      std::fprintf(stderr, "stop needs 4 or more ranks\n");
      return 2;
    }
    stop(comm);
  } else {
    std::fprintf(stderr, "usage: mismatch_check matrix|matched|stop [-a ALGORITHM] [--large]\n");
    return 2;
  }
  chorus_comm_finalize(comm);
  std::printf("mismatch_check %s rank %d of %d (algorithm %s%s): %d passed, %d failed\n",
              mode.c_str(), g_rank, g_size, algorithm.empty() ? "auto" : algorithm.c_str(),
              large ? ", large" : "", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
