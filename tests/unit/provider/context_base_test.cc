// ContextBase: context_open's info checks and endpoint_open's argument checks.
#include <catch2/catch.hpp>

#include <chorus/provider/context_base.hpp>

#include <cstddef>
#include <string>
#include <tuple>
#include <utility>

using namespace chorus::provider;

namespace {

class TestContext : public ContextBase {
 public:
  using ContextBase::already_open;
  using ContextBase::check_endpoint_open;
  using ContextBase::ContextBase;
};

chorus_tp_context_info_t info_of(int rank, int size) {
  chorus_tp_context_info_t info{};
  info.struct_size = sizeof info;
  info.rank = rank;
  info.size = size;
  info.data_channels = 2;
  return info;
}

/// The status and text `f` throws as Error; fails the test when it throws nothing.
template <class F>
std::pair<int, std::string> thrown(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.status(), e.what()};
  }
  FAIL("no Error thrown");
  return {};
}

}  // namespace

TEST_CASE("ContextBase keeps rank, size and data channels from a valid info", "[provider]") {
  const TestContext ctx(info_of(2, 4));
  CHECK(ctx.rank() == 2);
  CHECK(ctx.size() == 4);
  CHECK(ctx.data_channels() == 2);

  auto old = info_of(0, 2);
  old.struct_size = offsetof(chorus_tp_context_info_t, config_count) + sizeof(std::size_t);
  CHECK(TestContext(old).data_channels() == 0);  // minor 0's info: unknown
}

TEST_CASE("ContextBase refuses a short info and a rank out of range", "[provider]") {
  auto info = info_of(0, 2);
  info.struct_size = 8;
  auto [status, text] = thrown([&] { TestContext{info}; });
  CHECK(status == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(text == "context info struct_size 8 is too small for ABI minor 0");

  std::tie(status, text) = thrown([&] { TestContext{info_of(3, 3)}; });
  CHECK(status == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(text == "rank 3 is out of range for size 3");
  CHECK(thrown([&] { TestContext{info_of(-1, 3)}; }).first == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(thrown([&] { TestContext{info_of(0, 0)}; }).first == CHORUS_ERR_INVALID_ARGUMENT);
}

TEST_CASE("check_endpoint_open names what is wrong with endpoint_open's arguments", "[provider]") {
  const TestContext ctx(info_of(1, 3));
  char buf[64];
  std::size_t len = sizeof buf;
  CHECK_NOTHROW(ctx.check_endpoint_open(0, 0, buf, &len));
  CHECK_NOTHROW(ctx.check_endpoint_open(2, 5, buf, &len));

  CHECK(thrown([&] { ctx.check_endpoint_open(0, 0, nullptr, &len); }).second ==
        "NULL address buffer or length");
  CHECK(thrown([&] { ctx.check_endpoint_open(0, 0, buf, nullptr); }).second ==
        "NULL address buffer or length");
  CHECK(thrown([&] { ctx.check_endpoint_open(3, 0, buf, &len); }).second ==
        "peer rank 3 is out of range for size 3");
  CHECK(thrown([&] { ctx.check_endpoint_open(-1, 0, buf, &len); }).second ==
        "peer rank -1 is out of range for size 3");
  CHECK(thrown([&] { ctx.check_endpoint_open(1, 0, buf, &len); }).second ==
        "rank 1 cannot open an endpoint to itself");
  const auto [status, text] = thrown([&] { ctx.check_endpoint_open(0, -1, buf, &len); });
  CHECK(status == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(text == "channel -1 is negative");

  const Error open = ctx.already_open(2, 1);
  CHECK(open.status() == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(std::string(open.what()) == "an endpoint to rank 2 (channel 1) is already open");
  CHECK(std::string(ctx.already_open(2, 2).what()) ==
        "an endpoint to rank 2 (notice channel) is already open");
}
