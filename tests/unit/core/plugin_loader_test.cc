#include <catch2/catch.hpp>

#include "core/plugin_loader.h"

using namespace chorus::core;

TEST_CASE("plugin file names follow libchorus-<kind>-<name>.so", "[loader]") {
  CHECK(plugin_file_name(PluginKind::kTransport, "tcp") == "libchorus-transport-tcp.so");
  CHECK(plugin_file_name(PluginKind::kAlgorithm, "ring") == "libchorus-algorithm-ring.so");
}

TEST_CASE("the search path puts explicit folders first", "[loader]") {
  auto path = plugin_search_path({"/first", "/second"});
  REQUIRE(path.size() >= 2);
  CHECK(path[0] == "/first");
  CHECK(path[1] == "/second");
}

TEST_CASE("the built-in plugins of the build tree are found and load", "[loader]") {
  auto path = plugin_search_path({});
  auto tcp = load_plugin(PluginKind::kTransport, "tcp", path);
  REQUIRE(tcp.is_ok());
  CHECK((*tcp)->transport()->name == std::string("tcp"));
  auto ring = load_plugin(PluginKind::kAlgorithm, "ring", path);
  REQUIRE(ring.is_ok());
  // The ring is an algorithm ABI v2 plugin, with every collective.
  CHECK((*ring)->algorithm() == nullptr);
  REQUIRE((*ring)->algorithm_v2() != nullptr);
  CHECK((*ring)->algorithm_v2()->name == std::string("ring"));
  for (int c = 0; c < CHORUS_COLL_COUNT; ++c) CHECK((*ring)->implements(c));
  // Loading again returns the same cached plugin.
  auto again = load_plugin(PluginKind::kAlgorithm, "ring", path);
  REQUIRE(again.is_ok());
  CHECK(again->get() == ring->get());
}
