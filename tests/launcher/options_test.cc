#include "tools/chorusrun/options.h"

#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "tools/chorusrun/exit_codes.h"

namespace chorus::run {
namespace {

struct Parsed {
  CommandLine result;
  std::string out;
  std::string err;
};

Parsed parse(std::vector<std::string> args) {
  args.insert(args.begin(), "chorusrun");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  std::ostringstream out;
  std::ostringstream err;
  auto result = parse_command_line(static_cast<int>(argv.size()), argv.data(), out, err);
  return {std::move(result), out.str(), err.str()};
}

TEST_CASE("options have documented defaults", "[unit]") {
  const auto p = parse({"-n", "3", "prog"});
  REQUIRE(p.result.options);
  const Options& o = *p.result.options;
  CHECK(o.ranks == 3);
  CHECK(o.command == std::vector<std::string>{"prog"});
  CHECK(o.env.empty());
  CHECK_FALSE(o.coordinator);
  CHECK(o.prefix_output);
  CHECK(o.grace_seconds == 5.0);
  CHECK_FALSE(o.timeout_seconds);
}

TEST_CASE("every option is parsed", "[unit]") {
  const auto p = parse({"--ranks=2", "--coordinator", "h:9", "--env", "A=1", "--env", "B=2",
                        "--no-prefix", "--grace", "0.5", "--timeout", "30", "prog", "x"});
  REQUIRE(p.result.options);
  const Options& o = *p.result.options;
  CHECK(o.ranks == 2);
  CHECK(o.coordinator == "h:9");
  CHECK(o.env == std::vector<std::string>{"A=1", "B=2"});
  CHECK_FALSE(o.prefix_output);
  CHECK(o.grace_seconds == 0.5);
  CHECK(o.timeout_seconds == 30.0);
  CHECK(o.command == std::vector<std::string>{"prog", "x"});
}

TEST_CASE("option parsing stops at the program or at --", "[unit]") {
  auto p = parse({"-n", "1", "python3", "-c", "print(1)", "-n", "7", "--timeout", "x"});
  REQUIRE(p.result.options);
  CHECK(p.result.options->command ==
        std::vector<std::string>{"python3", "-c", "print(1)", "-n", "7", "--timeout", "x"});
  CHECK_FALSE(p.result.options->timeout_seconds);

  p = parse({"-n", "1", "--", "-weird-name", "--", "a"});
  REQUIRE(p.result.options);
  CHECK(p.result.options->command == std::vector<std::string>{"-weird-name", "--", "a"});
}

TEST_CASE("usage errors say what is wrong and exit 2", "[unit]") {
  const auto p = parse({"-n", "2"});
  CHECK_FALSE(p.result.options);
  CHECK(p.result.exit_code == kExitUsage);
  CHECK(p.err == "chorusrun: no PROGRAM to run\nRun 'chorusrun --help' for usage.\n");
  CHECK(p.out.empty());
}

TEST_CASE("help and version exit 0", "[unit]") {
  auto p = parse({"--help"});
  CHECK_FALSE(p.result.options);
  CHECK(p.result.exit_code == 0);
  CHECK(p.out.find("Usage: chorusrun") != std::string::npos);
  p = parse({"--version"});
  CHECK(p.result.exit_code == 0);
  CHECK(p.out.find("chorusrun (Chorus)") != std::string::npos);
}

}  // namespace
}  // namespace chorus::run
