#include <catch2/catch.hpp>

#include "core/config.h"

#include <chorus/chorus.h>

#include <unistd.h>
#include <cstdio>
#include <fstream>

using chorus::core::ConfigInputs;
using chorus::core::load_config;

namespace {

/// A TOML file in /tmp that removes itself.
struct TempToml {
  std::string path;
  explicit TempToml(const std::string& text) {
    char name[] = "/tmp/chorus-config-XXXXXX.toml";
    int fd = mkstemps(name, 5);
    REQUIRE(fd >= 0);
    close(fd);
    path = name;
    std::ofstream(path) << text;
  }
  ~TempToml() { std::remove(path.c_str()); }
};

}  // namespace

TEST_CASE("no file and no environment gives the embedded default", "[config]") {
  auto cfg = load_config({});
  REQUIRE(cfg.is_ok());
  CHECK(cfg->transport == "auto");
  CHECK(cfg->algorithm[CHORUS_COLL_ALL_REDUCE] == "auto");
  CHECK(cfg->bind_address == "127.0.0.1");
  CHECK(cfg->source == "embedded default");
  CHECK(cfg->rank == -1);
}

TEST_CASE("file keys are read with types", "[config]") {
  TempToml f(R"(
plugin_path = ["/opt/a", "/opt/b"]
[transport]
name = "tcp"
tcp.sockets = 2
[algorithm]
all_reduce = "ring"
channels = 2
staging_slot_size = "256K"
ring.pipeline = true
[timeout]
collective = 2.5
[log]
level = "debug"
[bootstrap]
coordinator = "127.0.0.1:29500"
)");
  ConfigInputs in;
  in.api_config_path = f.path;
  auto cfg = load_config(in);
  REQUIRE(cfg.is_ok());
  CHECK(cfg->algorithm[CHORUS_COLL_ALL_REDUCE] == "ring");
  CHECK(cfg->channels == 2);
  CHECK(cfg->staging_slot_size == 256 * 1024);
  CHECK(cfg->timeout_collective_s == Approx(2.5));
  CHECK(cfg->log_level == CHORUS_LOG_DEBUG);
  CHECK(cfg->coordinator == "127.0.0.1:29500");
  REQUIRE(cfg->transport_settings["tcp"].size() == 1);
  CHECK(cfg->transport_settings["tcp"][0].key == "sockets");
  CHECK(cfg->transport_settings["tcp"][0].value == "2");
  CHECK(cfg->transport_settings["tcp"][0].origin == f.path + ":5");
  CHECK(cfg->algorithm_settings["ring"][0].value == "true");
  CHECK(cfg->plugin_path == std::vector<std::string>{"/opt/a", "/opt/b"});
}

TEST_CASE("an unknown key names file, line and key", "[config]") {
  TempToml f("[timeout]\ncolective = 3\n");
  ConfigInputs in;
  in.api_config_path = f.path;
  auto cfg = load_config(in);
  REQUIRE_FALSE(cfg.is_ok());
  CHECK(cfg.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK_THAT(cfg.status().message(), Catch::StartsWith(f.path + ":2: key 'timeout.colective'"));
  CHECK_THAT(cfg.status().message(), Catch::Contains("unknown key"));
}

TEST_CASE("a wrong type and a bad value are errors with the line", "[config]") {
  {
    TempToml f("[algorithm]\nchannels = \"two\"\n");
    ConfigInputs in;
    in.api_config_path = f.path;
    auto cfg = load_config(in);
    REQUIRE_FALSE(cfg.is_ok());
    CHECK_THAT(cfg.status().message(), Catch::Contains(":2: key 'algorithm.channels'"));
    CHECK_THAT(cfg.status().message(), Catch::Contains("expected an integer, got a string"));
  }
  {
    TempToml f("\n\n[log]\nlevel = \"loud\"\n");
    ConfigInputs in;
    in.api_config_path = f.path;
    auto cfg = load_config(in);
    REQUIRE_FALSE(cfg.is_ok());
    CHECK_THAT(cfg.status().message(), Catch::Contains(":4: key 'log.level'"));
    CHECK_THAT(cfg.status().message(), Catch::Contains("'loud' is not one of"));
  }
  {
    TempToml f("[collectives]\nlanes = 4\ndriver = \"fibers\"\n");
    ConfigInputs in;
    in.api_config_path = f.path;
    auto cfg = load_config(in);
    REQUIRE_FALSE(cfg.is_ok());
    CHECK_THAT(cfg.status().message(), Catch::Contains(":3: key 'collectives.driver'"));
    CHECK_THAT(cfg.status().message(), Catch::Contains("\"shared\""));
    CHECK_THAT(cfg.status().message(), Catch::Contains("\"threads\""));
  }
  {
    TempToml f("[collectives]\nfusion_bytes = \"2G\"\n");
    ConfigInputs in;
    in.api_config_path = f.path;
    auto cfg = load_config(in);
    REQUIRE_FALSE(cfg.is_ok());
    CHECK_THAT(cfg.status().message(), Catch::Contains(":2: key 'collectives.fusion_bytes'"));
    CHECK_THAT(cfg.status().message(), Catch::Contains("between 0"));
  }
  for (const char* text : {"0", "\"64K\"", "1048576"}) {
    TempToml f(std::string("[collectives]\nfusion_bytes = ") + text + "\n");
    ConfigInputs in;
    in.api_config_path = f.path;
    auto cfg = load_config(in);
    REQUIRE(cfg.is_ok());
    CHECK(cfg->fusion_bytes == (text[0] == '0' ? 0u : text[0] == '"' ? 65536u : 1048576u));
  }
  for (const char* driver : {"shared", "threads"}) {
    TempToml f(std::string("[collectives]\ndriver = \"") + driver + "\"\n");
    ConfigInputs in;
    in.api_config_path = f.path;
    auto cfg = load_config(in);
    REQUIRE(cfg.is_ok());
    CHECK(cfg->lane_driver_shared == (std::string(driver) == "shared"));
  }
  {
    TempToml f("[timeout]\ninit = -1\n");
    ConfigInputs in;
    in.api_config_path = f.path;
    auto cfg = load_config(in);
    REQUIRE_FALSE(cfg.is_ok());
    CHECK_THAT(cfg.status().message(), Catch::Contains("positive number of seconds"));
  }
}

TEST_CASE("a TOML syntax error names file, line and column", "[config]") {
  TempToml f("[transport\nname = \"tcp\"\n");
  ConfigInputs in;
  in.api_config_path = f.path;
  auto cfg = load_config(in);
  REQUIRE_FALSE(cfg.is_ok());
  CHECK_THAT(cfg.status().message(), Catch::StartsWith(f.path + ":1:"));
  CHECK_THAT(cfg.status().message(), Catch::Contains("TOML syntax error"));
}

TEST_CASE("a missing file is a clear error", "[config]") {
  ConfigInputs in;
  in.env["CHORUS_CONFIG"] = "/nonexistent/chorus.toml";
  auto cfg = load_config(in);
  REQUIRE_FALSE(cfg.is_ok());
  CHECK_THAT(cfg.status().message(), Catch::Contains("'/nonexistent/chorus.toml' cannot be read"));
}

TEST_CASE("environment overrides the file, the API overrides both", "[config]") {
  TempToml f("[timeout]\ncollective = 10\ninit = 5\n[transport]\ntcp.sockets = 1\n");
  ConfigInputs in;
  in.env["CHORUS_CONFIG"] = f.path;
  in.env["CHORUS_TIMEOUT_COLLECTIVE"] = "20";
  in.env["CHORUS_TIMEOUT_INIT"] = "7";
  in.env["CHORUS_TRANSPORT_TCP_SOCKETS"] = "4";
  in.env["CHORUS_RANK"] = "3";
  in.env["CHORUS_WORLD_SIZE"] = "4";
  in.env["CHORUS_COORDINATOR"] = "127.0.0.1:1234";
  in.env["CHORUS_PLUGIN_PATH"] = "/x:/y";
  in.api_settings = {"timeout.collective = 30", "algorithm.all_gather=\"ring\""};
  auto cfg = load_config(in);
  REQUIRE(cfg.is_ok());
  CHECK(cfg->timeout_collective_s == Approx(30));
  CHECK(cfg->timeout_init_s == Approx(7));
  CHECK(cfg->rank == 3);
  CHECK(cfg->world_size == 4);
  CHECK(cfg->coordinator == "127.0.0.1:1234");
  CHECK(cfg->transport_settings["tcp"].at(0).value == "4");
  CHECK(cfg->transport_settings["tcp"].at(0).origin ==
        "environment variable CHORUS_TRANSPORT_TCP_SOCKETS");
  CHECK(cfg->algorithm[CHORUS_COLL_ALL_GATHER] == "ring");
  CHECK(cfg->plugin_path == std::vector<std::string>{"/x", "/y"});
  CHECK(cfg->origins["timeout.collective"] == "API setting 'timeout.collective = 30'");
}

TEST_CASE("bad environment values and unknown CHORUS_ variables are errors", "[config]") {
  {
    ConfigInputs in;
    in.env["CHORUS_RANK"] = "two";
    auto cfg = load_config(in);
    REQUIRE_FALSE(cfg.is_ok());
    CHECK_THAT(cfg.status().message(), Catch::Contains("environment variable CHORUS_RANK"));
    CHECK_THAT(cfg.status().message(), Catch::Contains("expected an integer, got 'two'"));
  }
  {
    ConfigInputs in;
    in.env["CHORUS_TIMEOUTCOLLECTIVE"] = "5";
    auto cfg = load_config(in);
    REQUIRE_FALSE(cfg.is_ok());
    CHECK_THAT(cfg.status().message(),
               Catch::Contains("CHORUS_TIMEOUTCOLLECTIVE is not a Chorus setting"));
  }
  {
    ConfigInputs in;
    in.env["CHORUS_COORDINATOR"] = "localhost";
    auto cfg = load_config(in);
    REQUIRE_FALSE(cfg.is_ok());
    CHECK_THAT(cfg.status().message(), Catch::Contains("is not host:port"));
  }
}

TEST_CASE("a typo in the file is reported even when the environment overrides the key",
          "[config]") {
  TempToml f("[algorithm]\nchannels = 0\n");
  ConfigInputs in;
  in.api_config_path = f.path;
  in.env["CHORUS_ALGORITHM_CHANNELS"] = "2";
  auto cfg = load_config(in);
  REQUIRE_FALSE(cfg.is_ok());
  CHECK_THAT(cfg.status().message(), Catch::Contains("channels must be between 1 and 64"));
}

TEST_CASE("API settings must be key=value TOML", "[config]") {
  ConfigInputs in;
  in.api_settings = {"transport.name=tcp"};
  auto cfg = load_config(in);
  REQUIRE_FALSE(cfg.is_ok());
  CHECK_THAT(cfg.status().message(), Catch::Contains("is not valid TOML"));
}

TEST_CASE("sizes parse with binary suffixes", "[config]") {
  CHECK(*chorus::core::parse_size("4096") == 4096);
  CHECK(*chorus::core::parse_size("64K") == 65536);
  CHECK(*chorus::core::parse_size("1M") == 1048576);
  CHECK(*chorus::core::parse_size("2G") == 2147483648ull);
  CHECK_FALSE(chorus::core::parse_size("12Q").is_ok());
  CHECK_FALSE(chorus::core::parse_size("").is_ok());
}

TEST_CASE("launcher variables give rank, size and coordinator", "[config]") {
  using chorus::core::slurm_first_host;
  CHECK(slurm_first_host("node[03-05,9],gpu1") == "node03");
  CHECK(slurm_first_host("a,b") == "a");
  CHECK(slurm_first_host("solo") == "solo");
  {
    ConfigInputs in;
    in.env = {{"SLURM_PROCID", "2"},
              {"SLURM_NTASKS", "4"},
              {"SLURM_JOB_NODELIST", "host[1-2]"},
              {"SLURM_JOB_ID", "77"}};
    auto cfg = load_config(in);
    REQUIRE(cfg.is_ok());
    CHECK(cfg->rank == 2);
    CHECK(cfg->world_size == 4);
    CHECK(cfg->coordinator == "host1:" + std::to_string(20000 + (77 * 31) % 30000));
    CHECK(cfg->origins["bootstrap.rank"] == "launcher variable SLURM_PROCID");
  }
  {
    ConfigInputs in;
    in.env = {{"OMPI_COMM_WORLD_RANK", "1"},
              {"OMPI_COMM_WORLD_SIZE", "3"},
              {"CHORUS_COORDINATOR", "127.0.0.1:5000"}};
    auto cfg = load_config(in);
    REQUIRE(cfg.is_ok());
    CHECK(cfg->rank == 1);
    CHECK(cfg->world_size == 3);
    CHECK(cfg->coordinator == "127.0.0.1:5000");
  }
  {
    ConfigInputs in;
    in.env = {
        {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29500"}};
    auto cfg = load_config(in);
    REQUIRE(cfg.is_ok());
    CHECK(cfg->coordinator == "10.1.2.3:29501");
  }
  {
    // Chorus's own variables win over the launcher's.
    ConfigInputs in;
    in.env = {{"SLURM_PROCID", "2"},
              {"SLURM_NTASKS", "4"},
              {"CHORUS_RANK", "0"},
              {"CHORUS_WORLD_SIZE", "1"}};
    auto cfg = load_config(in);
    REQUIRE(cfg.is_ok());
    CHECK(cfg->rank == 0);
    CHECK(cfg->world_size == 1);
  }
}

TEST_CASE("chorus_config_get reports a key's value and origin, or none for the default",
          "[config]") {
  char value[128], origin[128];
  ::unsetenv("CHORUS_TRANSPORT");
  ::unsetenv("CHORUS_CONFIG");
  REQUIRE(chorus_config_get(nullptr, "transport.name", value, sizeof value, origin,
                            sizeof origin) == CHORUS_OK);
  CHECK(std::string(value).empty());
  CHECK(std::string(origin).empty());

  ::setenv("CHORUS_TRANSPORT", "shm", 1);
  REQUIRE(chorus_config_get(nullptr, "transport.name", value, sizeof value, origin,
                            sizeof origin) == CHORUS_OK);
  CHECK(std::string(value) == "shm");
  CHECK(std::string(origin) == "environment variable CHORUS_TRANSPORT");

  // An API setting overrides the environment; its value is TOML text.
  const char* settings[] = {"algorithm.channels=3", "transport.name=\"tcp\""};
  chorus_options_t opts;
  chorus_options_init(&opts);
  opts.settings = settings;
  opts.settings_count = 2;
  REQUIRE(chorus_config_get(&opts, "transport.name", value, sizeof value, origin, sizeof origin) ==
          CHORUS_OK);
  CHECK(std::string(value) == "'tcp'");  // TOML text, as toml++ writes it
  CHECK(std::string(origin) == "API setting 'transport.name=\"tcp\"'");
  REQUIRE(chorus_config_get(&opts, "algorithm.channels", value, sizeof value, nullptr, 0) ==
          CHORUS_OK);
  CHECK(std::string(value) == "3");

  // Too small a buffer names the length it needs; a rejected configuration
  // is rejected as chorus_comm_init would.
  char tiny[2];
  CHECK(chorus_config_get(&opts, "transport.name", tiny, sizeof tiny, nullptr, 0) ==
        CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(std::string(chorus_last_error()).find("needs 6 bytes") != std::string::npos);
  ::setenv("CHORUS_TIMEOUT_INIT", "soon", 1);
  CHECK(chorus_config_get(nullptr, "transport.name", value, sizeof value, origin, sizeof origin) ==
        CHORUS_ERR_INVALID_ARGUMENT);
  ::unsetenv("CHORUS_TIMEOUT_INIT");
  ::unsetenv("CHORUS_TRANSPORT");
}
