// Settings: values parsed, bad ones reported naming key, value and origin.
#include <catch2/catch.hpp>

#include <chorus/provider/error.hpp>
#include <chorus/provider/settings.hpp>

#include <string>
#include <vector>

using chorus::provider::Error;
using chorus::provider::Settings;

namespace {

constexpr Settings kSettings("demo", "size, count, flag");

std::string error_of(const chorus_kv_t& kv, void (*f)(const chorus_kv_t&)) {
  try {
    f(kv);
  } catch (const Error& e) {
    CHECK(e.status() == CHORUS_ERR_INVALID_ARGUMENT);
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("settings parse integers, byte counts and booleans", "[provider]") {
  const chorus_kv_t count{"count", "42", "test"};
  CHECK(kSettings.parse_int(count, 0, 100, "0 to 100") == 42);
  const chorus_kv_t size{"size", "4MiB", "test"};
  CHECK(kSettings.parse_bytes(size, 0, std::uint64_t{1} << 30, "bytes") == (4u << 20));
  const chorus_kv_t size_k{"size", "512k", "test"};
  CHECK(kSettings.parse_bytes(size_k, 0, std::uint64_t{1} << 30, "bytes") == 512u * 1024);
  const chorus_kv_t on{"flag", "on", "test"};
  CHECK(kSettings.parse_bool(on));
  const chorus_kv_t zero{"flag", "0", "test"};
  CHECK_FALSE(kSettings.parse_bool(zero));
}

TEST_CASE("bad settings name the key, the value and the origin", "[provider]") {
  const chorus_kv_t big{"count", "101", "file.toml:3"};
  const std::string msg = error_of(big, [](const chorus_kv_t& kv) {
    (void)kSettings.parse_int(kv, 0, 100, "an integer from 0 to 100");
  });
  CHECK(msg ==
        "transport.demo.count = '101' (from file.toml:3): expected an integer from 0 to 100");

  const chorus_kv_t over{"size", "2G", nullptr};
  const std::string too_big = error_of(over, [](const chorus_kv_t& kv) {
    (void)kSettings.parse_bytes(kv, 0, std::uint64_t{1} << 30, "up to 1G");
  });
  CHECK(too_big == "transport.demo.size = '2G' (from unknown origin): expected up to 1G");

  const chorus_kv_t suffix{"size", "4X", "env"};
  CHECK(error_of(suffix, [](const chorus_kv_t& kv) {
          (void)kSettings.parse_bytes(kv, 0, 100, "bytes");
        }).find("expected bytes") != std::string::npos);

  const chorus_kv_t unknown{"colour", "red", "env"};
  CHECK(error_of(unknown, [](const chorus_kv_t& kv) { kSettings.unknown_key(kv); }) ==
        "transport.demo.colour = 'red' (from env): unknown key; valid keys below "
        "transport.demo are: size, count, flag");
}

TEST_CASE("each() checks the table and every entry", "[provider]") {
  std::vector<std::string> keys;
  const chorus_kv_t entries[] = {{"a", "1", ""}, {"b", "2", ""}};
  kSettings.each(entries, 2, [&](const chorus_kv_t& kv) { keys.emplace_back(kv.key); });
  CHECK(keys == std::vector<std::string>{"a", "b"});

  CHECK_THROWS_WITH(kSettings.each(nullptr, 1, [](const chorus_kv_t&) {}),
                    Catch::Contains("config is NULL"));
  const chorus_kv_t null_value[] = {{"a", "1", ""}, {"b", nullptr, ""}};
  CHECK_THROWS_WITH(kSettings.each(null_value, 2, [](const chorus_kv_t&) {}),
                    Catch::Contains("transport.demo config entry 1 has a NULL key or value"));
}

TEST_CASE("settings parse a table of keys and list them for an unknown one", "[provider]") {
  constexpr Settings settings("demo");
  int count = 0;
  std::uint64_t size = 0;
  bool flag = false;
  std::string mode;
  const auto parse = [&](const std::vector<chorus_kv_t>& kvs) {
    settings.parse(
        kvs.data(), kvs.size(), settings.integer("count", count, 0, 100, "0 to 100"),
        settings.bytes("size", size, 0, std::uint64_t{1} << 30, "bytes"),
        settings.boolean("flag", flag),
        chorus::provider::SettingKey{"mode", [&](const chorus_kv_t& kv) { mode = kv.value; }});
  };
  parse({{"count", "7", "test"},
         {"size", "2K", "test"},
         {"flag", "yes", "test"},
         {"mode", "fast", "test"}});
  CHECK(count == 7);
  CHECK(size == 2048);
  CHECK(flag);
  CHECK(mode == "fast");
  try {
    parse({{"colour", "red", "a.toml:3"}});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) ==
          "transport.demo.colour = 'red' (from a.toml:3): unknown key; valid keys below "
          "transport.demo are: count, size, flag, mode");
  }
  try {
    parse({{"count", "101", "env"}});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "transport.demo.count = '101' (from env): expected 0 to 100");
  }
}
