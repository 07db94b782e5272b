// CompletionQueue: ABI ordering of successes and failures, growth, forget.
#include <catch2/catch.hpp>

#include <chorus/provider/completion_queue.hpp>

#include <cstring>
#include <string>
#include <vector>

using chorus::provider::CompletionQueue;
using chorus::provider::last_error_text;

namespace {

// Endpoint handles are opaque to the queue; any distinct addresses do.
char ep_a_storage, ep_b_storage;
auto* const ep_a = reinterpret_cast<chorus_tp_endpoint_t*>(&ep_a_storage);
auto* const ep_b = reinterpret_cast<chorus_tp_endpoint_t*>(&ep_b_storage);

struct Reaped {
  std::vector<std::uint64_t> opcodes;
  void operator()(chorus_tp_endpoint_t*, std::uint32_t op) { opcodes.push_back(op); }
};

}  // namespace

TEST_CASE("poll hands out successes older than the oldest failure, then PENDING", "[provider]") {
  CompletionQueue cq;
  Reaped reaped;
  cq.push(ep_a, CHORUS_TP_SEND, 1, 10);
  cq.push(ep_a, CHORUS_TP_RECV, 2, 20);
  cq.push_error(ep_b, CHORUS_TP_RECV, 3, CHORUS_ERR_PEER_LOST, 7, "peer went away");
  cq.push(ep_a, CHORUS_TP_SEND, 4, 40);

  chorus_tp_completion_t out[8];
  REQUIRE(cq.poll(out, 8, reaped) == 2);
  CHECK(out[0].wr_id == 1);
  CHECK(out[0].byte_len == 10);
  CHECK(out[0].endpoint == ep_a);
  CHECK(out[1].wr_id == 2);
  CHECK(out[1].opcode == CHORUS_TP_RECV);

  CHECK(cq.poll(out, 8, reaped) == CHORUS_ERR_PENDING);
  CHECK(std::string(last_error_text()).find("read_error") != std::string::npos);

  chorus_tp_error_t err{};
  REQUIRE(cq.read_error(&err, reaped) == CHORUS_OK);
  CHECK(err.wr_id == 3);
  CHECK(err.status == CHORUS_ERR_PEER_LOST);
  CHECK(err.peer_rank == 7);
  CHECK(err.endpoint == ep_b);
  CHECK(std::string(err.message) == "peer went away");

  REQUIRE(cq.poll(out, 8, reaped) == 1);
  CHECK(out[0].wr_id == 4);
  CHECK(cq.empty());
  CHECK(reaped.opcodes.size() == 4);

  CHECK(cq.read_error(&err, reaped) == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(cq.poll(out, 8, reaped) == 0);
}

TEST_CASE("poll respects max and the NULL array check", "[provider]") {
  CompletionQueue cq;
  Reaped reaped;
  for (std::uint64_t i = 0; i < 5; ++i) cq.push(ep_a, CHORUS_TP_SEND, i, 0);
  chorus_tp_completion_t out[2];
  CHECK(cq.poll(nullptr, 2, reaped) == CHORUS_ERR_INVALID_ARGUMENT);
  CHECK(cq.poll(out, 2, reaped) == 2);
  CHECK(out[1].wr_id == 1);
  CHECK(cq.ready_successes() == 3);
  CHECK(cq.poll(out, 0, reaped) == 0);
}

TEST_CASE("the ring grows and keeps order", "[provider]") {
  CompletionQueue cq;
  Reaped reaped;
  constexpr std::uint64_t kCount = 5000;  // several times the initial ring
  for (std::uint64_t i = 0; i < kCount; ++i) cq.push(ep_a, CHORUS_TP_SEND, i, i);
  std::vector<chorus_tp_completion_t> out(kCount);
  REQUIRE(cq.poll(out.data(), out.size(), reaped) == static_cast<int>(kCount));
  for (std::uint64_t i = 0; i < kCount; ++i) REQUIRE(out[i].wr_id == i);
}

TEST_CASE("forget drops one endpoint's entries only", "[provider]") {
  CompletionQueue cq;
  Reaped reaped;
  cq.push(ep_a, CHORUS_TP_SEND, 1, 0);
  cq.push(ep_b, CHORUS_TP_SEND, 2, 0);
  cq.push_error(ep_a, CHORUS_TP_RECV, 3, CHORUS_ERR_SYSTEM, 0, "x");
  cq.push(ep_b, CHORUS_TP_RECV, 4, 0);
  cq.forget(ep_a);
  chorus_tp_completion_t out[4];
  REQUIRE(cq.poll(out, 4, reaped) == 2);
  CHECK(out[0].wr_id == 2);
  CHECK(out[1].wr_id == 4);
  CHECK(cq.empty());
}

TEST_CASE("long failure text is cut and terminated", "[provider]") {
  CompletionQueue cq;
  Reaped reaped;
  const std::string long_text(1000, 'e');
  cq.push_error(ep_a, CHORUS_TP_SEND, 1, CHORUS_ERR_SYSTEM, 0, long_text);
  chorus_tp_error_t err{};
  REQUIRE(cq.read_error(&err, reaped) == CHORUS_OK);
  CHECK(std::strlen(err.message) == sizeof(err.message) - 1);
}
