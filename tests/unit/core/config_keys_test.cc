// The key registry against docs/configuration.md's key table (both
// directions) and against the parser; the suggestions configuration errors
// carry.
#include <catch2/catch.hpp>

#include "core/config.h"
#include "core/config_keys.h"
#include "core/plugin_loader.h"
#include "core/suggest.h"

#include <unistd.h>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

using namespace chorus::core;

namespace {

struct DocRow {
  std::string key;
  std::string env;  // the table's environment column, as written
};

/// The rows of the table under "## Keys" in docs/configuration.md: first
/// column `key`, fourth column the environment variables.
std::vector<DocRow> documented_keys() {
  std::ifstream in(CHORUS_SOURCE_DIR "/docs/configuration.md");
  REQUIRE(in.good());
  std::vector<DocRow> rows;
  std::string line;
  bool in_section = false, in_table = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) {
      in_section = line == "## Keys";
      continue;
    }
    if (!in_section) continue;
    if (line.rfind("| key |", 0) == 0) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (line.rfind("|", 0) != 0) break;  // the table ended
    if (line.rfind("|---", 0) == 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    std::string cell;
    while (std::getline(ss, cell, '|')) cells.push_back(cell);
    REQUIRE(cells.size() >= 5);
    auto a = cells[0].find('`'), b = cells[0].rfind('`');
    REQUIRE(a != std::string::npos);
    REQUIRE(b > a);
    rows.push_back({cells[0].substr(a + 1, b - a - 1), cells[3]});
  }
  return rows;
}

/// A value each key accepts, as TOML text (placeholders filled in).
std::pair<std::string, std::string> sample(const ConfigKey& k) {
  std::string key(k.key);
  if (key == "transport.<name>.<key>") return {"transport.tcp.sockets", "2"};
  if (key == "algorithm.<collective>") return {"algorithm.all_gather", "\"ring\""};
  if (key == "algorithm.<name>.<key>") return {"algorithm.ring.bidirectional", "true"};
  static const std::map<std::string, std::string> no_default = {
      {"transport.auto.host_id", "\"h1\""},
      {"plugin_path", "[\"/opt/x\"]"},
      {"bootstrap.rank", "0"},
      {"bootstrap.world_size", "1"},
      {"bootstrap.coordinator", "\"127.0.0.1:29500\""},
      {"bootstrap.job_token", "\"secret\""}};
  if (auto it = no_default.find(key); it != no_default.end()) return *it;
  REQUIRE_FALSE(k.default_value.empty());
  return {key, std::string(k.default_value)};
}

}  // namespace

TEST_CASE("every accepted key is in docs/configuration.md's table and back", "[config_keys]") {
  auto rows = documented_keys();
  REQUIRE(rows.size() > 10);
  std::set<std::string> documented, registered;
  for (const auto& r : rows) documented.insert(r.key);
  for (const auto& k : config_keys()) registered.insert(std::string(k.key));
  for (const auto& k : registered) {
    INFO("accepted by the parser but missing from docs/configuration.md: " << k);
    CHECK(documented.count(k) == 1);
  }
  for (const auto& k : documented) {
    INFO("in docs/configuration.md but not a key the parser accepts: " << k);
    CHECK(registered.count(k) == 1);
  }
  // The environment column names every variable of the key.
  for (const auto& r : rows) {
    const ConfigKey* k = find_config_key(r.key);
    if (!k) continue;
    std::stringstream vars{std::string(k->env)};
    std::string var;
    while (std::getline(vars, var, ',')) {
      while (!var.empty() && var.front() == ' ') var.erase(0, 1);
      INFO(r.key << ": environment column '" << r.env << "' lacks " << var);
      CHECK(r.env.find("`" + var + "`") != std::string::npos);
    }
  }
}

TEST_CASE("the parser accepts every registered key and rejects unregistered ones",
          "[config_keys]") {
  for (const auto& k : config_keys()) {
    auto [key, value] = sample(k);
    ConfigInputs in;
    in.api_settings.push_back(key + "=" + value);
    if (key == "bootstrap.rank") in.api_settings.push_back("bootstrap.world_size=1");
    auto cfg = load_config(in);
    INFO(key << "=" << value << ": " << (cfg.is_ok() ? "" : cfg.status().message()));
    CHECK(cfg.is_ok());
  }
  for (const char* key : {"algorithm.chanels", "timeout.recv", "log.lvl", "network.bind"}) {
    ConfigInputs in;
    in.api_settings.push_back(std::string(key) + "=1");
    auto cfg = load_config(in);
    REQUIRE_FALSE(cfg.is_ok());
    CHECK_THAT(cfg.status().message(), Catch::Contains("unknown key"));
  }
}

TEST_CASE("edit distance counts inserts, deletes, substitutions and swaps", "[config_keys]") {
  CHECK(edit_distance("channels", "channels") == 0);
  CHECK(edit_distance("chanels", "channels") == 1);
  CHECK(edit_distance("chnanels", "channels") == 1);  // swapped neighbours
  CHECK(edit_distance("tpc", "tcp") == 1);
  CHECK(edit_distance("rign", "ring") == 1);
  CHECK(edit_distance("ofi", "shm") == 3);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("abcdefgh", "a") == 4);  // capped at cap + 1
  CHECK(did_you_mean("tpc", {"auto", "shm", "tcp"}) == " (did you mean 'tcp'?)");
  CHECK(did_you_mean("xyz", {"auto", "shm", "tcp"}).empty());
  CHECK(did_you_mean("tcp", {"tcp"}).empty());
}

TEST_CASE("config errors suggest the fix", "[config_keys]") {
  auto error_of = [](const std::string& setting) {
    ConfigInputs in;
    in.api_settings.push_back(setting);
    auto cfg = load_config(in);
    REQUIRE_FALSE(cfg.is_ok());
    CHECK(cfg.status().code() == CHORUS_ERR_INVALID_ARGUMENT);
    return cfg.status().message();
  };
  CHECK_THAT(error_of("algorithm.chanels=2"),
             Catch::Contains("unknown key (did you mean 'algorithm.channels'?)"));
  CHECK_THAT(error_of("algorithm.switch_byte=1"),
             Catch::Contains("did you mean 'algorithm.switch_bytes'?"));
  // A wrong type or range names what the key takes.
  CHECK_THAT(error_of("algorithm.channels=\"2\""),
             Catch::Contains("expected an integer, got a string; algorithm.channels takes an "
                             "integer from 1 to 64"));
  CHECK_THAT(error_of("algorithm.deterministic=1"),
             Catch::Contains("algorithm.deterministic takes true or false"));
  CHECK_THAT(error_of("bootstrap.rank=-3"),
             Catch::Contains("-3 is out of range; bootstrap.rank takes an integer from 0 to"));
  CHECK_THAT(error_of("log.level=\"wrn\""), Catch::Contains("did you mean 'warn'?"));
  // A bare word where TOML wants a quoted string.
  CHECK_THAT(error_of("transport.name=tcp"),
             Catch::Contains("strings must be quoted in TOML: write transport.name = \"tcp\""));

  char name[] = "/tmp/chorus-keys-XXXXXX.toml";
  int fd = mkstemps(name, 5);
  REQUIRE(fd >= 0);
  close(fd);
  std::ofstream(name) << "# comment\n[transport]\nname = tcp   # the default\n";
  ConfigInputs in;
  in.api_config_path = name;
  auto cfg = load_config(in);
  std::remove(name);
  REQUIRE_FALSE(cfg.is_ok());
  CHECK_THAT(cfg.status().message(), Catch::StartsWith(std::string(name) + ":3:"));
  CHECK_THAT(cfg.status().message(),
             Catch::EndsWith("strings must be quoted in TOML: write name = \"tcp\""));
  // A number stays a number: no quoting hint for a malformed one.
  CHECK_THAT(error_of("algorithm.channels=2x"), !Catch::Contains("must be quoted"));
  // A misspelt environment variable.
  ConfigInputs env;
  env.env["CHORUS_ALGORITHM_CHANELS"] = "2";
  auto from_env = load_config(env);
  REQUIRE_FALSE(from_env.is_ok());
  CHECK_THAT(from_env.status().message(),
             Catch::Contains("did you mean 'CHORUS_ALGORITHM_CHANNELS'?"));
}

TEST_CASE("a plugin that is not found lists the installed ones and the near name",
          "[config_keys]") {
  auto path = plugin_search_path({});
  auto tp = load_plugin(PluginKind::kTransport, "tpc", path);
  REQUIRE_FALSE(tp.is_ok());
  CHECK_THAT(tp.status().message(), Catch::Contains("(did you mean 'tcp'?)"));
  CHECK_THAT(tp.status().message(), Catch::Contains("installed transports: auto, "));
  CHECK_THAT(tp.status().message(), Catch::Contains("tcp"));
  CHECK_THAT(tp.status().message(), Catch::Contains("shm"));
  auto algo = load_plugin(PluginKind::kAlgorithm, "rign", path);
  REQUIRE_FALSE(algo.is_ok());
  CHECK_THAT(algo.status().message(), Catch::Contains("(did you mean 'ring'?)"));
  CHECK_THAT(algo.status().message(), Catch::Contains("installed algorithms: mesh, ring"));
}

TEST_CASE("the effective configuration names each value's source", "[config_keys]") {
  ConfigInputs in;
  in.env["CHORUS_ALGORITHM_CHANNELS"] = "4";
  in.api_settings.push_back("timeout.collective=12.5");
  auto cfg = load_config(in);
  REQUIRE(cfg.is_ok());
  std::map<std::string, EffectiveSetting> by_key;
  for (const auto& s : effective_settings(*cfg)) by_key[s.key] = s;
  CHECK(by_key["algorithm.channels"].value == "4");
  CHECK(by_key["algorithm.channels"].source == "environment variable CHORUS_ALGORITHM_CHANNELS");
  CHECK(by_key["timeout.collective"].value == "12.5");
  CHECK(by_key["timeout.collective"].source == "API setting 'timeout.collective=12.5'");
  CHECK(by_key["transport.name"].value == "\"auto\"");
  CHECK(by_key["transport.name"].source == "default");
  CHECK(by_key["algorithm.deterministic"].value == "false");
  CHECK(by_key["algorithm.switch_bytes"].source == "default");
  CHECK(by_key["bootstrap.coordinator"].source == "unset");
  CHECK(by_key.count("algorithm.all_reduce") == 1);
}
