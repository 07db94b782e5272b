// The mesh algorithm's settings: sizes with units, and every bad or unknown
// key refused with its origin named.
#include <catch2/catch.hpp>

#include "algorithms/mesh/mesh_settings.h"

#include <string>

using namespace chorus::mesh;

TEST_CASE("sizes parse with binary units", "[mesh]") {
  uint64_t v = 0;
  CHECK(parse_bytes("0", v));
  CHECK(v == 0);
  CHECK(parse_bytes("65536", v));
  CHECK(v == 65536);
  CHECK(parse_bytes("64K", v));
  CHECK(v == 65536);
  CHECK(parse_bytes("64kib", v));
  CHECK(v == 65536);
  CHECK(parse_bytes("1M", v));
  CHECK(v == (1u << 20));
  CHECK(parse_bytes("2GB", v));
  CHECK(v == (uint64_t(2) << 30));
  CHECK(parse_bytes("7B", v));
  CHECK(v == 7);
  CHECK_FALSE(parse_bytes("", v));
  CHECK_FALSE(parse_bytes("K", v));
  CHECK_FALSE(parse_bytes("-1", v));
  CHECK_FALSE(parse_bytes("12Q", v));
  CHECK_FALSE(parse_bytes("1.5M", v));
  CHECK_FALSE(parse_bytes("99999999999999999999", v));
  CHECK_FALSE(parse_bytes("17179869184G", v));
}

TEST_CASE("settings: defaults, known keys, refusals naming the origin", "[mesh]") {
  Settings s;
  std::string error;
  REQUIRE(parse_settings(nullptr, 0, s, error));
  CHECK(s.one_shot_max == (64u << 10));
  CHECK(s.barrier_radix == 0);

  chorus_kv_t good[] = {{"one_shot_max", "1M", "chorus.toml:3"}, {"barrier_radix", "4", "api"}};
  REQUIRE(parse_settings(good, 2, s, error));
  CHECK(s.one_shot_max == (1u << 20));
  CHECK(s.barrier_radix == 4);

  chorus_kv_t unknown[] = {
      {"one_shot_maximum", "1M", "env CHORUS_ALGORITHM_MESH_ONE_SHOT_MAXIMUM"}};
  Settings untouched;
  untouched.one_shot_max = 5;
  CHECK_FALSE(parse_settings(unknown, 1, untouched, error));
  CHECK(untouched.one_shot_max == 5);
  CHECK(error.find("algorithm.mesh.one_shot_maximum") != std::string::npos);
  CHECK(error.find("env CHORUS_ALGORITHM_MESH_ONE_SHOT_MAXIMUM") != std::string::npos);

  chorus_kv_t bad_size[] = {{"one_shot_max", "lots", "chorus.toml:9"}};
  CHECK_FALSE(parse_settings(bad_size, 1, s, error));
  CHECK(error.find("chorus.toml:9") != std::string::npos);
  CHECK(error.find("'lots'") != std::string::npos);

  for (const char* v : {"1", "-2", "two", "3x", ""}) {
    chorus_kv_t bad_radix[] = {{"barrier_radix", v, "api"}};
    CHECK_FALSE(parse_settings(bad_radix, 1, s, error));
  }
  chorus_kv_t zero_radix[] = {{"barrier_radix", "0", "api"}};
  CHECK(parse_settings(zero_radix, 1, s, error));
}
