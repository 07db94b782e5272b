// The loader refuses each broken fixture plugin with a message that says
// which fault it found, and accepts a well-formed one.
#include <catch2/catch.hpp>

#include "core/plugin_loader.h"

using chorus::core::load_plugin;
using chorus::core::PluginKind;

namespace {

std::string refusal(PluginKind kind, const std::string& name) {
  auto r = load_plugin(kind, name, {CHORUS_FIXTURE_DIR});
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == CHORUS_ERR_UNAVAILABLE);
  return r.status().message();
}

}  // namespace

TEST_CASE("well-formed fixtures load", "[plugin_abi]") {
  auto t = load_plugin(PluginKind::kTransport, "ok", {CHORUS_FIXTURE_DIR});
  REQUIRE(t.is_ok());
  CHECK((*t)->name() == "ok");
  CHECK((*t)->abi_version() == "1." + std::to_string(CHORUS_TRANSPORT_ABI_MINOR));
  auto a = load_plugin(PluginKind::kAlgorithm, "ok", {CHORUS_FIXTURE_DIR});
  REQUIRE(a.is_ok());
  CHECK((*a)->algorithm()->peers == CHORUS_ALGO_PEERS_RING);
}

TEST_CASE("transport without the v1 symbol is refused", "[plugin_abi]") {
  auto msg = refusal(PluginKind::kTransport, "no-symbol");
  CHECK_THAT(msg, Catch::Contains("exports no chorus_transport_plugin_v1 symbol"));
  CHECK_THAT(msg, Catch::Contains("libchorus-transport-no-symbol.so"));
}

TEST_CASE("transport with a short table is refused", "[plugin_abi]") {
  auto msg = refusal(PluginKind::kTransport, "short-table");
  CHECK_THAT(msg, Catch::Contains("table too short"));
  CHECK_THAT(msg, Catch::Contains("struct_size is"));
}

TEST_CASE("transport missing a mandatory op is refused naming the op", "[plugin_abi]") {
  auto msg = refusal(PluginKind::kTransport, "missing-op");
  CHECK_THAT(msg, Catch::Contains("mandatory op(s) missing (NULL): poll"));
}

TEST_CASE("transport whose init fails is refused with its reason", "[plugin_abi]") {
  auto msg = refusal(PluginKind::kTransport, "init-fails");
  CHECK_THAT(msg, Catch::Contains("init failed with CHORUS_ERR_UNAVAILABLE"));
  CHECK_THAT(msg, Catch::Contains("fixture: no device present"));
}

TEST_CASE("transport built for an unknown major is refused naming both versions", "[plugin_abi]") {
  auto msg = refusal(PluginKind::kTransport, "unknown-major");
  CHECK_THAT(msg, Catch::Contains("transport ABI v2"));
  CHECK_THAT(msg, Catch::Contains("supports v1 only"));
}

TEST_CASE("algorithm fixtures are refused for each fault", "[plugin_abi]") {
  CHECK_THAT(refusal(PluginKind::kAlgorithm, "no-symbol"),
             Catch::Contains(
                 "exports no chorus_algorithm_plugin_v1 or chorus_algorithm_plugin_v2 symbol"));
  CHECK_THAT(refusal(PluginKind::kAlgorithm, "short-table"), Catch::Contains("table too short"));
  CHECK_THAT(refusal(PluginKind::kAlgorithm, "missing-op"),
             Catch::Contains("mandatory op(s) missing (NULL): init"));
  CHECK_THAT(refusal(PluginKind::kAlgorithm, "init-fails"),
             Catch::Contains("init failed with CHORUS_ERR_INTERNAL"));
  CHECK_THAT(refusal(PluginKind::kAlgorithm, "unknown-major"), Catch::Contains("algorithm ABI v3"));
  CHECK_THAT(refusal(PluginKind::kAlgorithm, "bad-peers"), Catch::Contains("peers is 77"));
}

TEST_CASE("algorithm ABI v2 tables load, and broken ones are refused naming the fault",
          "[plugin_abi]") {
  auto ok = load_plugin(PluginKind::kAlgorithm, "v2-ok", {CHORUS_FIXTURE_DIR});
  REQUIRE(ok.is_ok());
  CHECK((*ok)->abi_version() == "2." + std::to_string(CHORUS_ALGORITHM_ABI_V2_MINOR));
  CHECK((*ok)->algorithm() == nullptr);
  REQUIRE((*ok)->algorithm_v2() != nullptr);
  CHECK((*ok)->implements(CHORUS_COLL_ALL_REDUCE));
  CHECK((*ok)->implements(CHORUS_COLL_BROADCAST));
  CHECK_FALSE((*ok)->implements(CHORUS_COLL_ALL_GATHER));
  CHECK_FALSE((*ok)->implements(CHORUS_COLL_COUNT));
  CHECK_THAT(refusal(PluginKind::kAlgorithm, "v2-missing-op"),
             Catch::Contains("mandatory op(s) missing (NULL): progress, task_free"));
  CHECK_THAT(refusal(PluginKind::kAlgorithm, "v2-no-collectives"),
             Catch::Contains("names no collective this Chorus knows"));
}

TEST_CASE("a plugin whose table name differs from its file name is refused, saying so",
          "[plugin_abi]") {
  // A renamed copy of a built-in: pinning it by its file name would load it,
  // and selection, which goes by the table's name, would never find it.
  auto msg = refusal(PluginKind::kTransport, "misnamed");
  CHECK_THAT(msg, Catch::Contains("libchorus-transport-misnamed.so"));
  CHECK_THAT(msg,
             Catch::Contains("named for transport 'misnamed' but its table names itself 'tcp'"));
  CHECK_THAT(msg, Catch::Contains("rename the file to libchorus-transport-tcp.so"));
  msg = refusal(PluginKind::kAlgorithm, "misnamed");
  CHECK_THAT(msg,
             Catch::Contains("named for algorithm 'misnamed' but its table names itself 'ring'"));
}

TEST_CASE("a missing plugin lists every path tried", "[plugin_abi]") {
  auto r = load_plugin(PluginKind::kTransport, "nonexistent", {"/nowhere/a", CHORUS_FIXTURE_DIR});
  REQUIRE_FALSE(r.is_ok());
  const auto& msg = r.status().message();
  CHECK_THAT(msg, Catch::Contains("transport 'nonexistent' not found"));
  CHECK_THAT(msg, Catch::Contains("/nowhere/a/libchorus-transport-nonexistent.so: no such file"));
  CHECK_THAT(msg, Catch::Contains(std::string(CHORUS_FIXTURE_DIR) +
                                  "/libchorus-transport-nonexistent.so"));
  CHECK_THAT(msg, Catch::Contains("CHORUS_PLUGIN_PATH"));
}
