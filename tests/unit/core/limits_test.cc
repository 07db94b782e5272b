// Arithmetic limits (issue #16): timeouts to deadlines, buffer sizes, overlap,
// config-file errors and the log rate limit, without any transport.
#include <catch2/catch.hpp>

#include "core/config.h"
#include "core/deadline.h"
#include "core/limits.h"
#include "core/log_limiter.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

using namespace chorus::core;
using std::chrono::milliseconds;

TEST_CASE("timeouts in seconds become milliseconds without wrapping", "[limits][deadline]") {
  CHECK(timeout_ms_from_seconds(300) == milliseconds(300000));
  CHECK(timeout_ms_from_seconds(2.5) == milliseconds(2500));
  // Positive values below 1 ms wait 1 ms; values between milliseconds round up.
  CHECK(timeout_ms_from_seconds(1e-6) == milliseconds(1));
  CHECK(timeout_ms_from_seconds(1e-300) == milliseconds(1));
  CHECK(timeout_ms_from_seconds(std::numeric_limits<double>::denorm_min()) == milliseconds(1));
  CHECK(timeout_ms_from_seconds(0.0015) == milliseconds(2));
  // Too large to represent: no deadline.
  for (double s : {1e10 * 1e9, 1e308, 0x1p63, 0x1p63 / 1000.0,
                   std::numeric_limits<double>::infinity(), std::numeric_limits<double>::max()})
    CHECK_FALSE(timeout_ms_from_seconds(s).has_value());
  // The largest value that still fits is kept as it is.
  CHECK(timeout_ms_from_seconds(9e15) == milliseconds(9'000'000'000'000'000'000LL));
}

TEST_CASE("a deadline saturates instead of wrapping into the past", "[limits][deadline]") {
  for (double s : {1e10, 1e308, 0x1p63, 9.2e15, 9.2e12, std::numeric_limits<double>::infinity()}) {
    INFO("timeout " << s << " s");
    Deadline d = Deadline::after_seconds(s);
    CHECK_FALSE(d.expired());
    CHECK(d.remaining_ms() == std::numeric_limits<int>::max());
  }
  // 1e10 s (317 years) is beyond steady_clock's nanosecond range from now.
  CHECK(Deadline::after_seconds(1e10).is_never());
  CHECK(Deadline::after(milliseconds::max()).is_never());
  // A finite deadline close to the clock's end does not wrap either.
  const auto now = Deadline::Clock::now();
  const auto room = std::chrono::floor<milliseconds>(Deadline::Clock::time_point::max() - now);
  Deadline near_end = Deadline::after(room - milliseconds(1), now);
  CHECK_FALSE(near_end.is_never());
  CHECK(near_end.at() > now);
  CHECK(Deadline::after(room, now).is_never());
  // Sub-millisecond timeouts are not "expired at once".
  CHECK_FALSE(Deadline::after_seconds(1e-6).expired());
  CHECK(Deadline::after_seconds(1e-6).remaining_ms() >= 0);
  CHECK(Deadline::after(milliseconds(0)).expired());
  CHECK(Deadline::after(milliseconds(-5)).expired());
}

TEST_CASE("buffer sizes beyond PTRDIFF_MAX are refused, never wrapped", "[limits]") {
  CHECK(buffer_bytes(10, 1, 4) == 40u);
  CHECK(buffer_bytes(0, 8, 16) == 0u);
  CHECK(buffer_bytes(kMaxBufferBytes, 1, 1) == kMaxBufferBytes);
  CHECK_FALSE(buffer_bytes(kMaxBufferBytes + 1, 1, 1).has_value());
  CHECK_FALSE(buffer_bytes(SIZE_MAX, 1, 1).has_value());
  CHECK_FALSE(buffer_bytes(SIZE_MAX / 4, 1, 4).has_value());
  CHECK_FALSE(buffer_bytes(SIZE_MAX / 8 + 1, 1, 8).has_value());   // wraps to 0 in 64 bits
  CHECK_FALSE(buffer_bytes(uint64_t(1) << 61, 4, 1).has_value());  // count x ranks
  CHECK_FALSE(buffer_bytes(uint64_t(1) << 32, uint64_t(1) << 32, 1).has_value());
  CHECK(buffer_bytes(kMaxBufferBytes / 12, 3, 4).has_value());
  CHECK_FALSE(buffer_bytes(kMaxBufferBytes / 12 + 1, 3, 4).has_value());
  // Every accepted size leaves room for a piece size of up to 1 GiB to be added
  // (the chunk-count rounding of p2p and the algorithms).
  const uint64_t worst = *buffer_bytes(kMaxBufferBytes, 1, 1);
  CHECK(worst + (uint64_t(1) << 30) > worst);
}

TEST_CASE("address ranges: wrap and overlap", "[limits]") {
  CHECK_FALSE(range_wraps(0x1000, 0));
  CHECK_FALSE(range_wraps(UINTPTR_MAX, 1));
  CHECK(range_wraps(UINTPTR_MAX, 2));
  CHECK(range_wraps(0x1000, UINTPTR_MAX));
  CHECK_FALSE(range_wraps(0, UINTPTR_MAX));
  CHECK(ranges_overlap(100, 10, 101, 10));        // out = in + 1
  CHECK(ranges_overlap(101, 10, 100, 10));        // in = out + 1
  CHECK(ranges_overlap(100, 10, 100, 10));        // identical
  CHECK(ranges_overlap(100, 10, 109, 1));         // last byte
  CHECK_FALSE(ranges_overlap(100, 10, 110, 10));  // adjacent
  CHECK_FALSE(ranges_overlap(110, 10, 100, 10));
  CHECK_FALSE(ranges_overlap(100, 0, 100, 10));  // empty
  CHECK(ranges_overlap(0, UINTPTR_MAX, UINTPTR_MAX - 1, 1));
}

namespace {

Status load_with_env(const std::string& var, const std::string& value, Config* out = nullptr) {
  ConfigInputs in;
  in.env[var] = value;
  auto cfg = load_config(in);
  if (cfg.is_ok() && out) *out = *cfg;
  return cfg.is_ok() ? Status::ok() : cfg.status();
}

}  // namespace

TEST_CASE("timeout keys: huge and inf mean no deadline, NaN and negative are refused",
          "[limits][config]") {
  for (const char* var :
       {"CHORUS_TIMEOUT_COLLECTIVE", "CHORUS_TIMEOUT_INIT", "CHORUS_TIMEOUT_CONNECT"}) {
    INFO(var);
    for (const char* v : {"1e10", "1e308", "9223372036854775808", "inf", "1e-6"}) {
      INFO(v);
      CHECK(load_with_env(var, v).is_ok());
    }
    for (const char* v : {"nan", "-1", "-inf", "0", "1e400x"}) {
      INFO(v);
      Status st = load_with_env(var, v);
      CHECK(st.code() == CHORUS_ERR_INVALID_ARGUMENT);
      CHECK_THAT(st.message(), Catch::Contains(var));
      CHECK_THAT(st.message(), Catch::Contains("timeout."));
    }
  }
  Config cfg;
  REQUIRE(load_with_env("CHORUS_TIMEOUT_COLLECTIVE", "inf", &cfg).is_ok());
  CHECK(Deadline::after_seconds(cfg.timeout_collective_s).is_never());
  REQUIRE(load_with_env("CHORUS_TIMEOUT_INIT", "1e-6", &cfg).is_ok());
  CHECK_FALSE(Deadline::after_seconds(cfg.timeout_init_s).expired());
  // The same in a file, where TOML spells infinity and NaN itself.
  ConfigInputs in;
  in.api_settings = {"timeout.collective = inf"};
  CHECK(load_config(in).is_ok());
  in.api_settings = {"timeout.init = nan"};
  auto bad = load_config(in);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK_THAT(bad.status().message(), Catch::Contains("timeout.init"));
}

TEST_CASE("a config path that is a directory or unreadable is INVALID_ARGUMENT naming it",
          "[limits][config]") {
  char dir[] = "/tmp/chorus-config-dir-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  ConfigInputs in;
  in.env["CHORUS_CONFIG"] = dir;
  auto r = load_config(in);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.status().message(), Catch::Contains(dir));
  CHECK_THAT(r.status().message(), Catch::Contains("directory"));

  const std::string fifo = std::string(dir) + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  in.env["CHORUS_CONFIG"] = fifo;
  r = load_config(in);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.status().message(), Catch::Contains(fifo));

  const std::string missing = std::string(dir) + "/missing.toml";
  in.env["CHORUS_CONFIG"] = missing;
  r = load_config(in);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK_THAT(r.status().message(), Catch::Contains(missing));

  if (geteuid() != 0) {  // root reads mode-000 files
    const std::string locked = std::string(dir) + "/locked.toml";
    std::ofstream(locked) << "[log]\nlevel = \"info\"\n";
    REQUIRE(chmod(locked.c_str(), 0) == 0);
    in.env["CHORUS_CONFIG"] = locked;
    r = load_config(in);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
    CHECK_THAT(r.status().message(), Catch::Contains(locked));
    std::remove(locked.c_str());
  }
  std::remove(fifo.c_str());
  rmdir(dir);
}

TEST_CASE("the log limiter writes a few lines per kind, then counts", "[limits][log]") {
  using Clock = LogLimiter::Clock;
  LogLimiter lim;  // 5 per 10 s
  std::vector<LogLimiter::Summary> due;
  const Clock::time_point t0{};
  int written = 0;
  for (int i = 0; i < 36000; ++i) {
    const auto now = t0 + std::chrono::microseconds(i * 80);  // 36 000 lines in 2.9 s
    if (lim.admit(CHORUS_LOG_WARN, "dropped connection from 127.0.0.1:" + std::to_string(40000 + i),
                  now, due))
      ++written;
  }
  CHECK(written == 5);
  CHECK(due.empty());
  // Another kind is not held back by the first.
  CHECK(lim.admit(CHORUS_LOG_WARN, "something else", t0 + std::chrono::seconds(3), due));
  // After the interval, the next line of any kind brings out the count first.
  CHECK(lim.admit(CHORUS_LOG_WARN, "dropped connection from 10.0.0.1:1",
                  t0 + std::chrono::seconds(11), due));
  REQUIRE(due.size() == 1);
  CHECK(due[0].suppressed == 35995);
  CHECK_THAT(due[0].text(), Catch::Contains("35995 more like this in the last 11.0 s"));
  CHECK_THAT(due[0].text(), Catch::Contains("127.0.0.1:75999"));
  due.clear();
  // A kind whose burst was used long ago writes in full again.
  for (int i = 0; i < 4; ++i)
    CHECK(lim.admit(CHORUS_LOG_WARN, "dropped connection from 10.0.0.1:2",
                    t0 + std::chrono::seconds(12), due));
  CHECK_FALSE(lim.admit(CHORUS_LOG_WARN, "dropped connection from 10.0.0.1:3",
                        t0 + std::chrono::seconds(12), due));
  lim.flush(t0 + std::chrono::seconds(13), due);
  REQUIRE(due.size() == 1);
  CHECK(due[0].suppressed == 1);
  // Levels are separate kinds; a bounded number of kinds is tracked.
  LogLimiter small({2, std::chrono::seconds(10), 3});
  int kinds_written = 0;
  for (int k = 0; k < 100; ++k)
    for (int rep = 0; rep < 3; ++rep)
      kinds_written += small.admit(
          CHORUS_LOG_WARN,
          "kind " + std::string(1, char('A' + k % 26)) + std::string(1, char('a' + k / 26)), t0,
          due);
  CHECK(kinds_written <= 3 * 2 + 2);
}
