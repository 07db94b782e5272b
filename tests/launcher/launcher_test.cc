// End-to-end tests: the built chorusrun runs real processes (small shell
// scripts and launcher_rank_helper) and the tests check what comes out.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/launcher/subprocess.h"

namespace chorus::run::test {
namespace {

const std::string kChorusrun = CHORUSRUN_PATH;
const std::string kRankHelper = RANK_HELPER_PATH;

std::vector<std::string> chorusrun(std::vector<std::string> args) {
  args.insert(args.begin(), kChorusrun);
  return args;
}

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/chorusrun-test-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Whether pid names a live process (a zombie or a missing entry is dead).
bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content;
  if (!std::getline(stat, content)) return false;
  const auto paren = content.rfind(')');
  return paren == std::string::npos || paren + 2 >= content.size() ||
         (content[paren + 2] != 'Z' && content[paren + 2] != 'X');
}

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) ++n;
  return n;
}

TEST_CASE("every rank gets its own rank and the job's shared variables", "[e2e]") {
  const auto r = run(chorusrun(
      {"-n", "4", "sh", "-c",
       "echo \"$CHORUS_RANK $CHORUS_WORLD_SIZE $CHORUS_COORDINATOR $CHORUS_JOB_TOKEN\""}));
  REQUIRE_FALSE(r.timed_out);
  CHECK(r.exit_code == 0);
  CHECK(r.err.empty());
  const std::regex line(R"(\[(\d)\] (\d) 4 (127\.0\.0\.1:\d+) ([0-9a-f]{32}))");
  std::set<int> ranks;
  std::set<std::string> coordinators;
  std::set<std::string> tokens;
  const auto lines = lines_of(r.out);
  REQUIRE(lines.size() == 4);
  for (const auto& l : lines) {
    std::smatch m;
    INFO(l);
    REQUIRE(std::regex_match(l, m, line));
    CHECK(m[1] == m[2]);  // the prefix names the rank that printed the line
    ranks.insert(std::stoi(m[2]));
    coordinators.insert(m[3]);
    tokens.insert(m[4]);
  }
  CHECK(ranks == std::set<int>{0, 1, 2, 3});
  CHECK(coordinators.size() == 1);
  CHECK(tokens.size() == 1);
}

TEST_CASE("each job gets a fresh token and coordinator port", "[e2e]") {
  const std::vector<std::string> cmd =
      chorusrun({"-n", "1", "sh", "-c", "echo $CHORUS_COORDINATOR $CHORUS_JOB_TOKEN"});
  const auto a = run(cmd);
  const auto b = run(cmd);
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  CHECK(a.out != b.out);
}

TEST_CASE("the job token and coordinator and env variables given reach every rank", "[e2e]") {
  const std::string script =
      "echo \"$CHORUS_JOB_TOKEN $CHORUS_COORDINATOR $FROM_ENV $FROM_FLAG $TWICE\"";
  const auto r =
      run(chorusrun({"-n", "2", "--coordinator", "10.1.2.3:29500", "--env", "FROM_FLAG=flag value",
                     "--env", "TWICE=first", "--env", "TWICE=second", "sh", "-c", script}),
          {"CHORUS_JOB_TOKEN=feedface", "FROM_ENV=inherited"});
  REQUIRE(r.exit_code == 0);
  CHECK(count_of(r.out, "feedface 10.1.2.3:29500 inherited flag value second\n") == 2);

  SECTION("--env overrides the inherited token") {
    const auto t = run(chorusrun({"-n", "1", "--env", "CHORUS_JOB_TOKEN=fromflag", "sh", "-c",
                                  "echo $CHORUS_JOB_TOKEN"}),
                       {"CHORUS_JOB_TOKEN=feedface"});
    CHECK(t.out == "[0] fromflag\n");
  }
}

TEST_CASE("program arguments that look like options reach the program", "[e2e]") {
  // printf, not echo: dash's echo would take "-n" for its own option.
  const std::string script = "printf '%s|' \"$@\"; echo";
  const auto plain = run(chorusrun({"-n", "1", "sh", "-c", script, "sh", "-n", "5", "--env", "x"}));
  CHECK(plain.exit_code == 0);
  CHECK(plain.out == "[0] -n|5|--env|x|\n");

  const auto dashes = run(chorusrun({"-n", "1", "--", "sh", "-c", script, "sh", "--", "-h"}));
  CHECK(dashes.exit_code == 0);
  CHECK(dashes.out == "[0] --|-h|\n");
}

TEST_CASE("output lines stay whole and carry their rank's prefix", "[e2e]") {
  constexpr int kRanks = 4;
  constexpr int kLines = 1000;
  const auto r =
      run(chorusrun({"-n", std::to_string(kRanks), kRankHelper, std::to_string(kLines)}));
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.exit_code == 0);

  const auto check_stream = [&](const std::string& text, const std::string& word) {
    const std::regex line(R"(\[(\d+)\] )" + word + R"(-(\d+)-(\d+))");
    std::map<int, int> next;  // rank -> next expected line number
    const auto lines = lines_of(text);
    CHECK(lines.size() == kRanks * kLines);
    for (const auto& l : lines) {
      std::smatch m;
      if (!std::regex_match(l, m, line) || m[1] != m[2]) {
        FAIL("malformed or mixed line: '" << l << "'");
      }
      const int rank = std::stoi(m[1]);
      REQUIRE(std::stoi(m[3]) == next[rank]);  // in order, none lost
      ++next[rank];
    }
    CHECK(next.size() == kRanks);
  };
  check_stream(r.out, "line");
  check_stream(r.err, "err");
}

TEST_CASE("no-prefix relays lines bare", "[e2e]") {
  const auto r = run(chorusrun({"-n", "2", "--no-prefix", "sh", "-c", "echo hello"}));
  CHECK(r.exit_code == 0);
  CHECK(r.out == "hello\nhello\n");
}

TEST_CASE("stderr goes to stderr and a last line without newline is kept", "[e2e]") {
  const auto r = run(chorusrun({"-n", "1", "sh", "-c", "echo out; printf 'a\\nno-newline' >&2"}));
  CHECK(r.exit_code == 0);
  CHECK(r.out == "[0] out\n");
  CHECK(r.err == "[0] a\n[0] no-newline\n");
}

TEST_CASE("ranks read stdin from /dev/null", "[e2e]") {
  const auto r = run(chorusrun({"-n", "2", "sh", "-c", "cat; echo done"}), {}, Seconds(10));
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 0);
  CHECK(count_of(r.out, "done\n") == 2);
}

TEST_CASE("the first failure's status is the job's and the others are stopped", "[e2e]") {
  const auto r =
      run(chorusrun({"-n", "4", "sh", "-c", "if [ $CHORUS_RANK = 2 ]; then exit 3; fi; sleep 60"}));
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 3);
  CHECK(r.elapsed < Seconds(10));
  CHECK(contains(r.err, "chorusrun: rank 2 exited with status 3\n"));
  // Ranks stopped by chorusrun's SIGTERM are not reported as failures.
  CHECK(count_of(r.err, "chorusrun: rank") == 1);
}

TEST_CASE("a rank killed by SIGKILL makes the job exit 137", "[e2e]") {
  const auto r = run(chorusrun(
      {"-n", "3", "sh", "-c", "if [ $CHORUS_RANK = 1 ]; then kill -KILL $$; fi; sleep 60"}));
  CHECK(r.exit_code == 137);
  CHECK(r.elapsed < Seconds(10));
  CHECK(contains(r.err, "chorusrun: rank 1 killed by signal 9 (Killed)\n"));
}

TEST_CASE("ranks that ignore SIGTERM are killed after the grace period", "[e2e]") {
  // Rank 1 fails only once rank 0 ignores SIGTERM (it has created `ready`),
  // or rank 0 could die of SIGTERM before its trap is set. Rank 0 would sleep
  // far longer than the harness's limit: the job ending in time at all shows
  // the SIGKILL, and the message below says which one.
  const TempDir dir;
  const std::string ready = dir.path() + "/ready";
  const auto r = run(chorusrun({"-n", "2", "--grace", "1", "sh", "-c",
                                "if [ $CHORUS_RANK = 1 ]; then "
                                "  while [ ! -e " +
                                    ready +
                                    " ]; do sleep 0.01; done; exit 1; "
                                    "fi; trap '' TERM; touch " +
                                    ready + "; sleep 600"}),
                     {}, Seconds(30));
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 1);
  CHECK(r.elapsed >= Seconds(0.9));  // not before the grace period was over
  CHECK(contains(r.err, "chorusrun: rank 1 exited with status 1\n"));
  CHECK(contains(r.err, "chorusrun: rank 0 still running 1 s after SIGTERM; sending SIGKILL\n"));
}

TEST_CASE("a program that cannot be run exits 127 with a message", "[e2e]") {
  const auto r = run(chorusrun({"-n", "2", "chorus-no-such-program"}));
  CHECK(r.exit_code == 127);
  // Whichever rank fails first is reported; the other may be stopped by
  // chorusrun before it has written its own message.
  CHECK(std::regex_search(r.err,
                          std::regex(R"(\[[01]\] chorusrun: cannot run 'chorus-no-such-program': )"
                                     R"(No such file or directory\n)")));
  CHECK(std::regex_search(r.err, std::regex(R"(chorusrun: rank [01] exited with status 127\n)")));
}

TEST_CASE("a timeout stops the job and exits 124", "[e2e]") {
  const auto r = run(chorusrun({"-n", "2", "--timeout", "1", "sleep", "600"}), {}, Seconds(30));
  CHECK_FALSE(r.timed_out);  // stopped by chorusrun, long before the sleep ends
  CHECK(r.exit_code == 124);
  CHECK(r.elapsed >= Seconds(0.9));  // not before the timeout
  CHECK(contains(r.err, "--timeout"));
}

TEST_CASE("processes a rank leaves behind do not keep the job alive", "[e2e]") {
  const auto r = run(chorusrun({"-n", "2", "sh", "-c", "sleep 60 & echo started"}));
  CHECK(r.exit_code == 0);
  CHECK(r.elapsed < Seconds(5));
  CHECK(count_of(r.out, "started\n") == 2);
}

TEST_CASE("processes a rank leaves behind are killed when the job ends", "[e2e]") {
  // The background sleep holds no pipe of chorusrun's, so only its process
  // group ties it to the job.
  const auto r = run(chorusrun({"-n", "2", "sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"}));
  CHECK(r.exit_code == 0);
  std::vector<pid_t> pids;
  for (const auto& l : lines_of(r.out)) pids.push_back(std::stoi(l.substr(l.find(' ') + 1)));
  REQUIRE(pids.size() == 2);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (const pid_t pid : pids) {
    while (process_alive(pid) && std::chrono::steady_clock::now() < deadline) ::usleep(10'000);
    CHECK_FALSE(process_alive(pid));
  }
}

// Reads until `ranks` lines ending in " ready" have arrived on stdout, i.e.
// every rank has set itself up.
bool wait_until_ready(Subprocess& job, int ranks) {
  return job.read_until(
      [ranks](const std::string& out, const std::string&) {
        return count_of(out, " ready\n") == static_cast<std::size_t>(ranks);
      },
      Seconds(10));
}

TEST_CASE("SIGINT to chorusrun is forwarded to the ranks", "[e2e]") {
  Subprocess job(chorusrun(
      {"-n", "2", "sh", "-c", "trap 'echo got-int; exit 0' INT; echo ready; sleep 60 & wait"}));
  REQUIRE(wait_until_ready(job, 2));
  job.send_signal(SIGINT);
  const auto r = job.wait(Seconds(10));
  CHECK(r.exit_code == 130);
  CHECK(r.elapsed < Seconds(10));
  CHECK(contains(r.out, "[0] got-int\n"));
  CHECK(contains(r.out, "[1] got-int\n"));
  CHECK(contains(r.err, "chorusrun: received SIGINT"));
}

TEST_CASE("a second signal to chorusrun kills the ranks at once", "[e2e]") {
  Subprocess job(
      chorusrun({"-n", "2", "--grace", "60", "sh", "-c", "trap '' TERM; echo ready; sleep 60"}));
  REQUIRE(wait_until_ready(job, 2));
  job.send_signal(SIGTERM);
  REQUIRE(job.read_until(
      [](const std::string&, const std::string& err) {
        return contains(err, "received SIGTERM; forwarding");
      },
      Seconds(10)));
  job.send_signal(SIGTERM);
  const auto r = job.wait(Seconds(10));
  CHECK_FALSE(r.timed_out);
  CHECK(r.exit_code == 143);
  CHECK(contains(r.err, "sending SIGKILL"));
}

TEST_CASE("ranks die with chorusrun even when it is SIGKILLed", "[e2e]") {
  Subprocess job(chorusrun({"-n", "3", "sh", "-c", "echo pid=$$ ready; exec sleep 60"}));
  REQUIRE(wait_until_ready(job, 3));
  std::vector<pid_t> pids;
  const std::regex pid_line(R"(\[\d\] pid=(\d+) ready)");
  for (const auto& l : lines_of(job.out())) {
    std::smatch m;
    if (std::regex_match(l, m, pid_line)) pids.push_back(std::stoi(m[1]));
  }
  REQUIRE(pids.size() == 3);
  job.send_signal(SIGKILL);
  job.wait(Seconds(10));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (const pid_t pid : pids) {
    while (process_alive(pid) && std::chrono::steady_clock::now() < deadline) {
      ::usleep(10'000);
    }
    CHECK_FALSE(process_alive(pid));
  }
}

TEST_CASE("bad usage exits 2 with a message", "[e2e]") {
  const std::vector<std::vector<std::string>> bad = {
      {},
      {"sh", "-c", "true"},  // no -n
      {"-n", "0", "true"},   // n < 1
      {"-n", "-3", "true"},
      {"-n", "two", "true"},
      {"-n", "2"},  // no program
      {"-n", "2", "--"},
      {"-n", "2", "--bogus", "true"},  // not ours, not a program
      {"-n", "2", "--env", "NOEQUALS", "true"},
      {"-n", "2", "--env", "CHORUS_RANK=1", "true"},
      {"-n", "2", "--coordinator", "nohost", "true"},
      {"-n", "2", "--coordinator", "h:70000", "true"},
      {"-n", "2", "--timeout", "0", "true"},
      {"-n", "2", "--grace", "-1", "true"},
  };
  for (const auto& args : bad) {
    const auto r = run(chorusrun(args), {}, Seconds(10));
    INFO("args: " << Catch::Detail::stringify(args));
    CHECK(r.exit_code == 2);
    CHECK(r.err.rfind("chorusrun: ", 0) == 0);
    CHECK(r.out.empty());
  }
}

TEST_CASE("help documents the options and the environment contract", "[e2e]") {
  const auto r = run(chorusrun({"--help"}));
  CHECK(r.exit_code == 0);
  for (const char* part :
       {"Usage: chorusrun -n N [OPTIONS] [--] PROGRAM [ARGS...]", "--ranks", "--coordinator",
        "--env", "--no-prefix", "--grace", "--timeout", "CHORUS_RANK", "CHORUS_WORLD_SIZE",
        "CHORUS_COORDINATOR", "CHORUS_JOB_TOKEN", "124"}) {
    CHECK(contains(r.out, part));
  }
}

}  // namespace
}  // namespace chorus::run::test
