#include "tools/chorusrun/job_environment.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

namespace chorus::run {
namespace {

TEST_CASE("job tokens are 32 hex digits and differ", "[unit]") {
  const auto a = make_job_token();
  const auto b = make_job_token();
  CHECK(std::regex_match(a, std::regex("[0-9a-f]{32}")));
  CHECK(a != b);
}

TEST_CASE("a picked coordinator port is a real port", "[unit]") { CHECK(pick_free_port() > 0); }

TEST_CASE("coordinator addresses are checked", "[unit]") {
  for (const char* good : {"127.0.0.1:29500", "node-7:1", "[::1]:65535"}) {
    INFO(good);
    CHECK_FALSE(check_coordinator(good));
  }
  for (const char* bad :
       {"", "host", ":80", "host:", "host:0", "host:65536", "host:8x", "::1:80"}) {
    INFO(bad);
    CHECK(check_coordinator(bad));
  }
}

TEST_CASE("env assignments are checked", "[unit]") {
  CHECK_FALSE(check_env_assignment("A=1"));
  CHECK_FALSE(check_env_assignment("A="));
  CHECK_FALSE(check_env_assignment("CHORUS_JOB_TOKEN=x"));
  CHECK(check_env_assignment("A"));
  CHECK(check_env_assignment("=1"));
  CHECK(check_env_assignment("CHORUS_RANK=0"));
  CHECK(check_env_assignment("CHORUS_WORLD_SIZE=2"));
  CHECK(check_env_assignment("CHORUS_COORDINATOR=h:1"));
}

TEST_CASE("a rank's environment overrides inherited variables once each", "[unit]") {
  const std::vector<std::string> base = {"PATH=/bin", "CHORUS_RANK=9", "KEEP=1", "A=old",
                                         "CHORUS_JOB_TOKEN=inherited"};
  JobEnvironment job;
  job.world_size = 4;
  job.coordinator = "h:1";
  job.job_token = "t";
  job.extra = {"A=new", "B=1", "B=2"};
  const auto env = rank_environment(base, job, 2);
  const std::vector<std::string> expected = {"PATH=/bin",
                                             "KEEP=1",
                                             "A=new",
                                             "B=2",
                                             "CHORUS_RANK=2",
                                             "CHORUS_WORLD_SIZE=4",
                                             "CHORUS_COORDINATOR=h:1",
                                             "CHORUS_JOB_TOKEN=t"};
  CHECK(env == expected);
}

}  // namespace
}  // namespace chorus::run
