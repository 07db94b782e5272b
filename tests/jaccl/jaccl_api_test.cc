// Unit tests of the JACCL API as a JACCL user sees it: Config and the device
// file, the environment variables, init's strict / non-strict contract, the
// errors of a group of one, and the float16 / bfloat16 types. No chorus.h.
#include <jaccl/jaccl.h>
#include <jaccl/types.h>

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using Matrix = std::vector<std::vector<std::vector<std::string>>>;

/// Clears every variable that decides how init finds its job and restores
/// them when it goes out of scope.
class CleanEnvironment {
 public:
  CleanEnvironment() {
    for (const char* name : kNames) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      ::unsetenv(name);
    }
    // The device names of these tests exist on no host: the jobs name tcp,
    // which wins over the matrix's choice of verbs.
    ::setenv("CHORUS_TRANSPORT", "tcp", 1);
  }
  ~CleanEnvironment() {
    for (const char* name : kNames) ::unsetenv(name);
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

 private:
  static constexpr const char* kNames[] = {
      "JACCL_RANK",  "JACCL_COORDINATOR",     "JACCL_IBV_DEVICES",  "JACCL_RING",
      "MLX_RANK",    "MLX_JACCL_COORDINATOR", "MLX_IBV_DEVICES",    "MLX_JACCL_RING",
      "CHORUS_RANK", "CHORUS_WORLD_SIZE",     "CHORUS_COORDINATOR", "CHORUS_TRANSPORT"};
  std::map<std::string, std::string> saved_;
};

/// A file in the temp dir that disappears with the object.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/jaccl_api_test_XXXXXX";
    const int fd = ::mkstemp(name);
    REQUIRE(fd >= 0);
    ::close(fd);
    path_ = name;
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const char* path() const { return path_.c_str(); }

 private:
  std::string path_;
};

Matrix mesh(int n) {
  Matrix m(static_cast<size_t>(n), std::vector<std::vector<std::string>>(static_cast<size_t>(n)));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (i != j) m[i][j] = {"rdma_en" + std::to_string(i + j)};
  return m;
}

Matrix ring(int n) {
  Matrix m(static_cast<size_t>(n), std::vector<std::vector<std::string>>(static_cast<size_t>(n)));
  for (int i = 0; i < n; ++i) {
    m[i][(i + 1) % n] = {"rdma_en1"};
    m[i][(i + n - 1) % n] = {"rdma_en2"};
  }
  return m;
}

/// "127.0.0.1:<port>" with a port that was free a moment ago.
std::string free_coordinator() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
}

/// Runs init(cfg[r], true) for two ranks on two threads; returns each rank's
/// exception text ("" if it got a group), after an all_sum when both did.
std::vector<std::string> init_two_ranks(const jaccl::Config cfg[2]) {
  std::vector<std::string> errors(2);
  std::vector<std::shared_ptr<jaccl::Group>> groups(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        groups[r] = jaccl::init(cfg[r], true);
        int32_t one = 1, two = 0;
        groups[r]->all_sum(&one, &two, sizeof(one), jaccl::Int32);
        if (two != 2) errors[r] = "all_sum gave " + std::to_string(two);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "exception without text";
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("Config defaults to rank 0 of nothing", "[config]") {
  jaccl::Config c;
  CHECK(c.get_rank() == 0);
  CHECK(c.get_size() == 0);
  CHECK(c.get_coordinator().empty());
  CHECK_FALSE(c.get_prefer_ring());
  CHECK_FALSE(c.is_valid_mesh());
  CHECK_FALSE(c.is_valid_ring());
  CHECK_FALSE(c.is_valid());
}

TEST_CASE("Config setters chain and the size is the matrix's row count", "[config]") {
  auto c = jaccl::Config()
               .set_rank(2)
               .set_coordinator("10.0.0.1:5000")
               .set_devices(mesh(4))
               .prefer_ring();
  CHECK(c.get_rank() == 2);
  CHECK(c.get_size() == 4);
  CHECK(c.get_coordinator() == "10.0.0.1:5000");
  CHECK(c.get_prefer_ring());
  CHECK(c.is_valid());
  c.prefer_ring(false).set_coordinator(static_cast<const char*>(nullptr));
  CHECK_FALSE(c.get_prefer_ring());
  CHECK(c.get_coordinator().empty());
}

TEST_CASE("Config topologies", "[config]") {
  SECTION("a full mesh is a mesh and a ring") {
    auto c = jaccl::Config().set_devices(mesh(4));
    CHECK(c.is_valid_mesh());
    CHECK(c.is_valid_ring());
  }
  SECTION("neighbour links only make a ring, not a mesh") {
    auto c = jaccl::Config().set_devices(ring(4));
    CHECK_FALSE(c.is_valid_mesh());
    CHECK(c.is_valid_ring());
  }
  SECTION("a ring needs the same number of wires to every neighbour") {
    Matrix m = ring(4);
    m[2][3].push_back("rdma_en9");
    CHECK_FALSE(jaccl::Config().set_devices(m).is_valid_ring());
  }
  SECTION("a ring needs at least one wire") {
    Matrix m(4, std::vector<std::vector<std::string>>(4));
    CHECK_FALSE(jaccl::Config().set_devices(m).is_valid_ring());
  }
  SECTION("a device on the diagonal breaks the mesh") {
    Matrix m = mesh(3);
    m[1][1] = {"lo"};
    CHECK_FALSE(jaccl::Config().set_devices(m).is_valid_mesh());
  }
  SECTION("one rank is neither") {
    auto c = jaccl::Config().set_devices(Matrix(1, std::vector<std::vector<std::string>>(1)));
    CHECK(c.get_size() == 1);
    CHECK_FALSE(c.is_valid_mesh());
    CHECK_FALSE(c.is_valid_ring());
  }
  SECTION("the rank must be in range") {
    CHECK_FALSE(jaccl::Config().set_devices(mesh(2)).set_rank(2).is_valid());
    CHECK_FALSE(jaccl::Config().set_devices(mesh(2)).set_rank(-1).is_valid());
    CHECK(jaccl::Config().set_devices(mesh(2)).set_rank(1).is_valid());
  }
}

TEST_CASE("Config rejects a matrix that is not square", "[config]") {
  Matrix m = mesh(3);
  m[1].pop_back();
  CHECK_THROWS_AS(jaccl::Config().set_devices(m), std::invalid_argument);
}

TEST_CASE("Config parses ranks given as text", "[config]") {
  CHECK(jaccl::Config().set_rank("3").get_rank() == 3);
  for (const char* bad : {"", "x", "-1", "3a", " 3", "99999999999"})
    CHECK_THROWS_AS(jaccl::Config().set_rank(bad), std::invalid_argument);
  CHECK_THROWS_AS(jaccl::Config().set_rank(static_cast<const char*>(nullptr)),
                  std::invalid_argument);
}

TEST_CASE("Device files: null, a name or a list of names per peer", "[config][file]") {
  TempFile f(R"([[null, "rdma_en2", ["rdma_en3", "rdma_en4"]],
                 ["rdma_en2", null, "rdma_en5"],
                 [["rdma_en3", "rdma_en4"], "rdma_en5", []]])");
  auto c = jaccl::Config().set_devices_from_file(f.path());
  CHECK(c.get_size() == 3);
  CHECK(c.is_valid_mesh());
  CHECK(c.is_valid_ring() == false);  // rank 0 has 1 wire to rank 1 but 2 to rank 2
}

TEST_CASE("Device file errors name the file", "[config][file]") {
  auto message = [](const char* path) -> std::string {
    try {
      jaccl::Config().set_devices_from_file(path);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  };
  SECTION("missing file") {
    CHECK(contains(message("/nonexistent/devices.json"), "/nonexistent/devices.json"));
  }
  SECTION("not JSON") {
    TempFile f("[[null, ");
    CHECK(contains(message(f.path()), "not valid JSON"));
  }
  SECTION("not an array") {
    TempFile f(R"({"rank0": []})");
    CHECK(contains(message(f.path()), f.path()));
  }
  SECTION("a short row") {
    TempFile f(R"([[null, "a"], ["a"]])");
    CHECK(contains(message(f.path()), "rank 1 lists 1 peers"));
  }
  SECTION("a number where a name belongs") {
    TempFile f(R"([[null, 7], ["a", null]])");
    CHECK(contains(message(f.path()), "[0][1]"));
  }
}

TEST_CASE("from_env reads the JACCL variables and their MLX aliases", "[env]") {
  CleanEnvironment env;
  TempFile devices(R"([[null, "rdma_en2"], ["rdma_en2", null]])");

  SECTION("nothing set: nothing filled in") {
    auto c = jaccl::Config::from_env();
    CHECK(c.get_size() == 0);
    CHECK_FALSE(c.is_valid());
  }
  SECTION("JACCL_*") {
    env.set("JACCL_RANK", "1");
    env.set("JACCL_COORDINATOR", "127.0.0.1:4242");
    env.set("JACCL_IBV_DEVICES", devices.path());
    env.set("JACCL_RING", "1");
    auto c = jaccl::Config::from_env();
    CHECK(c.get_rank() == 1);
    CHECK(c.get_size() == 2);
    CHECK(c.get_coordinator() == "127.0.0.1:4242");
    CHECK(c.get_prefer_ring());
    CHECK(c.is_valid());
  }
  SECTION("MLX_* aliases") {
    env.set("MLX_RANK", "1");
    env.set("MLX_JACCL_COORDINATOR", "127.0.0.1:4243");
    env.set("MLX_IBV_DEVICES", devices.path());
    env.set("MLX_JACCL_RING", "");
    auto c = jaccl::Config::from_env();
    CHECK(c.get_rank() == 1);
    CHECK(c.get_size() == 2);
    CHECK(c.get_coordinator() == "127.0.0.1:4243");
    CHECK(c.get_prefer_ring());  // set, even empty, means prefer: as JACCL
  }
  SECTION("JACCL_* wins over MLX_*") {
    env.set("JACCL_RANK", "0");
    env.set("MLX_RANK", "1");
    CHECK(jaccl::Config::from_env().get_rank() == 0);
  }
  SECTION("a malformed rank names its variable") {
    env.set("MLX_RANK", "one");
    try {
      jaccl::Config::from_env();
      FAIL("no exception");
    } catch (const std::invalid_argument& e) {
      CHECK(contains(e.what(), "MLX_RANK"));
    }
  }
}

TEST_CASE("init: an invalid Config is nullptr, or an exception when strict", "[init]") {
  CleanEnvironment env;
  const jaccl::Config invalid = jaccl::Config().set_rank(0).set_coordinator("127.0.0.1:1");
  CHECK(jaccl::init(invalid) == nullptr);
  CHECK(jaccl::init(invalid, false) == nullptr);
  CHECK_THROWS_AS(jaccl::init(invalid, true), std::runtime_error);
  CHECK_THROWS_WITH(jaccl::init(invalid, true), Catch::Contains("no device matrix"));

  const jaccl::Config no_coordinator = jaccl::Config().set_rank(0).set_devices(mesh(2));
  CHECK(jaccl::init(no_coordinator, false) == nullptr);
  CHECK_THROWS_WITH(jaccl::init(no_coordinator, true), Catch::Contains("no coordinator"));

  const jaccl::Config out_of_range = jaccl::Config().set_rank(5).set_devices(mesh(2));
  CHECK_THROWS_WITH(jaccl::init(out_of_range, true), Catch::Contains("out of range"));
}

TEST_CASE("init: a partial JACCL environment is nullptr, or says what is missing", "[init][env]") {
  CleanEnvironment env;
  env.set("JACCL_RANK", "0");
  CHECK(jaccl::init(false) == nullptr);
  try {
    jaccl::init(true);
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(contains(e.what(), "JACCL_IBV_DEVICES"));
    CHECK(contains(e.what(), "JACCL_COORDINATOR"));
    CHECK_FALSE(contains(e.what(), "JACCL_RANK or"));
  }
}

TEST_CASE("prefer_ring reaches Chorus as pinned ring algorithms", "[init][ring]") {
  CleanEnvironment env;
  const std::string coordinator = free_coordinator();
  jaccl::Config cfg[2];
  for (int r = 0; r < 2; ++r) cfg[r].set_rank(r).set_coordinator(coordinator).set_devices(mesh(2));

  SECTION("the same preference on both ranks: a working group") {
    cfg[0].prefer_ring();
    cfg[1].prefer_ring();
    const auto errors = init_two_ranks(cfg);
    CHECK(errors[0] == "");
    CHECK(errors[1] == "");
  }
  SECTION("a ring on one rank only: Chorus's consistency check refuses the job") {
    cfg[0].prefer_ring();
    const auto errors = init_two_ranks(cfg);
    for (const auto& e : errors) {
      INFO(e);
      CHECK(contains(e, "[jaccl] init"));
      CHECK(contains(e, "disagree"));
      CHECK(contains(e, "ring"));
    }
  }
}

namespace {

/// Sets `name` for the object's lifetime and restores what was there.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* v = std::getenv(name)) saved_ = v;
    ::setenv(name, value, 1);
  }
  ~ScopedVariable() {
    if (saved_)
      ::setenv(name_, saved_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

}  // namespace

TEST_CASE("is_available answers whether the configured transport is usable", "[init]") {
  CleanEnvironment env;
  SECTION("tcp, Chorus's default, loads from the build tree") {
    ScopedVariable tcp("CHORUS_TRANSPORT", "tcp");
    CHECK(jaccl::is_available());
  }
  SECTION("a transport plugin that does not exist") {
    ScopedVariable missing("CHORUS_TRANSPORT", "nonexistent");
    CHECK_FALSE(jaccl::is_available());
    // init agrees: no group, and with strict the loader's reason.
    CHECK(jaccl::init(false) == nullptr);
    try {
      jaccl::init(true);
      FAIL("init(strict) made a group over a transport that does not exist");
    } catch (const std::runtime_error& e) {
      INFO(e.what());
      CHECK(contains(e.what(), "CHORUS_ERR_UNAVAILABLE"));
      CHECK(contains(e.what(), "nonexistent"));
    }
  }
  SECTION("auto, when one of its sub-transports does not exist") {
    ScopedVariable automatic("CHORUS_TRANSPORT", "auto");
    ScopedVariable fabric("CHORUS_TRANSPORT_AUTO_FABRIC", "nonexistent");
    CHECK_FALSE(jaccl::is_available());
  }
  SECTION("a configuration Chorus rejects") {
    ScopedVariable bad("CHORUS_TIMEOUT_INIT", "soon");
    CHECK_FALSE(jaccl::is_available());
  }
}

TEST_CASE("A device matrix selects verbs unless the configuration names a transport", "[init]") {
  CleanEnvironment env;
  TempFile devices("[[null, \"rdma_en1\"], [\"rdma_en1\", null]]\n");
  env.set("JACCL_RANK", "0");
  env.set("JACCL_COORDINATOR", "127.0.0.1:1");
  env.set("JACCL_IBV_DEVICES", devices.path());
  // This test's own view of the host's RDMA devices.
  bool rdma_here = false;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/infiniband", ec)) {
    (void)e;
    rdma_here = true;
  }
  SECTION("no transport named: verbs, and a device this host lacks fails init, strict or not") {
    ::unsetenv("CHORUS_TRANSPORT");
    if (!rdma_here) CHECK_FALSE(jaccl::is_available());
    for (bool strict : {false, true}) {
      try {
        jaccl::init(strict);
        FAIL("init made a group over a device that does not exist");
      } catch (const std::runtime_error& e) {
        INFO(e.what());
        CHECK(contains(e.what(),
                       "device 'rdma_en1' (row 0, toward rank 1 of the device matrix) "
                       "does not exist on this host; RDMA devices here: "));
        CHECK(contains(e.what(), "CHORUS_TRANSPORT=tcp"));
      }
    }
  }
  SECTION("the configuration names tcp: tcp wins, and is available") {
    CHECK(jaccl::is_available());
  }
  SECTION("a job size from Chorus's sources that differs from the matrix") {
    env.set("CHORUS_WORLD_SIZE", "3");
    try {
      jaccl::init(false);
      FAIL("init accepted a 2-rank matrix for a 3-rank job");
    } catch (const std::runtime_error& e) {
      INFO(e.what());
      CHECK(contains(e.what(),
                     "the device matrix has 2 ranks but the job has 3 (environment "
                     "variable CHORUS_WORLD_SIZE)"));
    }
  }
}

TEST_CASE("A process on its own is a group of one", "[group]") {
  CleanEnvironment env;
  std::shared_ptr<jaccl::Group> g = jaccl::init(true);
  REQUIRE(g != nullptr);
  CHECK(g->rank() == 0);
  CHECK(g->size() == 1);

  float in[5] = {1, 2, 3, 4, 5};
  float out[5] = {};
  g->all_sum(in, out, sizeof(in), jaccl::Float32);
  CHECK(out[4] == 5.0f);
  g->all_max(in, out, sizeof(in), jaccl::Float32);
  g->all_min(in, out, sizeof(in), jaccl::Float32);
  CHECK(out[0] == 1.0f);
  g->all_gather(in, out, sizeof(in));
  CHECK(out[2] == 3.0f);
  g->sum_scatter(in, out, sizeof(in), jaccl::Float32);
  CHECK(out[3] == 4.0f);
  g->barrier();

  SECTION("n_bytes must hold whole elements") {
    CHECK_THROWS_AS(g->all_sum(in, out, 6, jaccl::Float32), std::runtime_error);
    CHECK_THROWS_WITH(g->sum_scatter(in, out, 3, jaccl::Int16),
                      Catch::Contains("[jaccl] sum_scatter") && Catch::Contains("not a multiple"));
  }
  SECTION("an unknown dtype is refused") {
    CHECK_THROWS_WITH(g->all_max(in, out, 4, 14), Catch::Contains("unknown dtype 14"));
    CHECK_THROWS_AS(g->all_max(in, out, 4, -1), std::runtime_error);
  }
  SECTION("Chorus's own errors come through with their status") {
    // Chorus defines no ordering for complex values.
    jaccl::complex64_t c[1] = {{1.0f, 2.0f}};
    CHECK_THROWS_WITH(g->all_max(c, c, sizeof(c), jaccl::Complex64),
                      Catch::Contains("[jaccl] all_max") && Catch::Contains("CHORUS_ERR"));
    CHECK_THROWS_AS(g->send(in, 4, 3), std::runtime_error);
  }
  g->barrier();  // still usable after refused calls
}

TEST_CASE("dtype ids and their C++ types", "[types]") {
  const std::pair<int, size_t> sizes[] = {
      {jaccl::Bool, 1},    {jaccl::Int8, 1},     {jaccl::Int16, 2},    {jaccl::Int32, 4},
      {jaccl::Int64, 8},   {jaccl::UInt8, 1},    {jaccl::UInt16, 2},   {jaccl::UInt32, 4},
      {jaccl::UInt64, 8},  {jaccl::Float16, 2},  {jaccl::BFloat16, 2}, {jaccl::Float32, 4},
      {jaccl::Float64, 8}, {jaccl::Complex64, 8}};
  for (int i = 0; i < 14; ++i) {
    CHECK(sizes[i].first == i);
    size_t size = 0;
    jaccl::dispatch_all_types(i, [&](auto tag) { size = sizeof(JACCL_GET_TYPE(tag)); });
    CHECK(size == sizes[i].second);
  }
  bool called = false;
  jaccl::dispatch_all_types(14, [&](auto) { called = true; });
  CHECK_FALSE(called);
}

TEST_CASE("float16_t converts exactly and rounds to nearest even", "[types]") {
  auto bits = [](float x) { return jaccl::float16_t(x).bits_; };
  CHECK(bits(0.0f) == 0x0000);
  CHECK(bits(-0.0f) == 0x8000);
  CHECK(bits(1.0f) == 0x3c00);
  CHECK(bits(-2.0f) == 0xc000);
  CHECK(bits(65504.0f) == 0x7bff);
  CHECK(bits(65519.0f) == 0x7bff);
  CHECK(bits(65520.0f) == 0x7c00);  // the tie rounds up to infinity
  CHECK(bits(1e9f) == 0x7c00);
  CHECK(bits(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(bits(0x1p-24f) == 0x0001);             // smallest subnormal
  CHECK(bits(0x1p-25f) == 0x0000);             // tie to even: 0
  CHECK(bits(0x1.8p-24f) == 0x0002);           // tie to even: 2
  CHECK(bits(0x1p-14f) == 0x0400);             // smallest normal
  CHECK(bits(1.0f + 0x1p-11f) == 0x3c00);      // tie to even: down
  CHECK(bits(1.0f + 3 * 0x1p-11f) == 0x3c02);  // tie to even: up
  CHECK(std::isnan(float(jaccl::float16_t(std::numeric_limits<float>::quiet_NaN()))));

  // Every half converts to float and back unchanged (NaNs stay NaN).
  for (uint32_t h = 0; h < 0x10000; ++h) {
    jaccl::float16_t x;
    x.bits_ = uint16_t(h);
    const float f = x;
    if (std::isnan(f)) {
      REQUIRE(((h >> 10) & 0x1f) == 0x1f);
      REQUIRE(std::isnan(float(jaccl::float16_t(f))));
    } else {
      REQUIRE(jaccl::float16_t(f).bits_ == h);
    }
  }

#ifdef __FLT16_MAX__
  // Against the compiler's own conversion, over a spread of float patterns.
  for (uint64_t u = 0; u <= 0xffffffffu; u += 4093) {
    const float f = std::bit_cast<float>(uint32_t(u));
    if (std::isnan(f)) continue;
    REQUIRE(jaccl::float16_t(f).bits_ == std::bit_cast<uint16_t>(static_cast<_Float16>(f)));
  }
#endif
}

TEST_CASE("bfloat16_t converts exactly and rounds to nearest even", "[types]") {
  auto bits = [](float x) { return jaccl::bfloat16_t(x).bits_; };
  CHECK(bits(1.0f) == 0x3f80);
  CHECK(bits(-2.0f) == 0xc000);
  CHECK(bits(1.0f + 0x1p-8f) == 0x3f80);      // tie to even: down
  CHECK(bits(1.0f + 3 * 0x1p-8f) == 0x3f82);  // tie to even: up
  CHECK(bits(1.0f + 0x1.8p-8f) == 0x3f81);    // above the tie: up
  CHECK(bits(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(std::isnan(float(jaccl::bfloat16_t(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(float(jaccl::bfloat16_t(std::bit_cast<float>(0x7f800001u)))));  // not inf
  for (uint32_t h = 0; h < 0x10000; ++h) {
    jaccl::bfloat16_t x;
    x.bits_ = uint16_t(h);
    const float f = x;
    if (!std::isnan(f)) REQUIRE(jaccl::bfloat16_t(f).bits_ == h);
  }
  jaccl::bfloat16_t a = 1.5f;
  a += jaccl::bfloat16_t(2.0f);
  CHECK(float(a) == 3.5f);
  CHECK(jaccl::bfloat16_t(1.0f) < jaccl::bfloat16_t(2.0f));
}
