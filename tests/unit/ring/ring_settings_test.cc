// algorithm.ring.* settings: accepted values, and errors that name the key.
#include <catch2/catch.hpp>

#include "algorithms/ring/ring_settings.h"

using chorus::ring::parse_settings;
using chorus::ring::Settings;

TEST_CASE("ring settings: defaults and bidirectional", "[ring]") {
  Settings s;
  std::string error;
  REQUIRE(parse_settings(nullptr, 0, s, error));
  CHECK_FALSE(s.bidirectional);
  chorus_kv_t on[] = {{"bidirectional", "true", "config.toml:3"}};
  REQUIRE(parse_settings(on, 1, s, error));
  CHECK(s.bidirectional);
  chorus_kv_t off[] = {{"bidirectional", "0", "CHORUS_ALGORITHM_RING_BIDIRECTIONAL"}};
  REQUIRE(parse_settings(off, 1, s, error));
  CHECK_FALSE(s.bidirectional);
}

TEST_CASE("ring settings: bad value and unknown key are errors naming them", "[ring]") {
  Settings s;
  std::string error;
  chorus_kv_t bad[] = {{"bidirectional", "yes", "config.toml:3"}};
  CHECK_FALSE(parse_settings(bad, 1, s, error));
  CHECK(error.find("algorithm.ring.bidirectional") != std::string::npos);
  CHECK(error.find("config.toml:3") != std::string::npos);
  chorus_kv_t unknown[] = {{"chanels", "2", "config.toml:4"}};
  CHECK_FALSE(parse_settings(unknown, 1, s, error));
  CHECK(error.find("algorithm.ring.chanels") != std::string::npos);
}
