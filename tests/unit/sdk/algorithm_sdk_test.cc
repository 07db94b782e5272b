// The algorithm SDK's pipeline pieces (<chorus/algorithm_sdk.hpp>), built as
// C++17 as a third party may build them: try_post, LaneWrId, Flow, SlotPool,
// PostedQueue and ScratchPool, each against values worked out by hand.
#include <catch2/catch.hpp>

#include <chorus/algorithm_sdk.hpp>

#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace chorus::sdk;

namespace {

int g_next_rc = CHORUS_OK;  // what the fake transport's next post returns
uint64_t g_last_wr = 0;
std::string g_failed;

int post_send(chorus_tp_endpoint_t*, const void*, size_t, chorus_tp_mr_t*, uint64_t wr) {
  g_last_wr = wr;
  return g_next_rc;
}
int post_recv(chorus_tp_endpoint_t*, void*, size_t, chorus_tp_mr_t*, uint64_t wr) {
  g_last_wr = wr;
  return g_next_rc;
}
const char* last_error() { return "queue pair in error state"; }

struct FakeEnv {
  chorus_transport_plugin_v1_t tp{};
  std::vector<std::vector<char>> mem;
  std::vector<void*> slots;
  std::vector<chorus_tp_mr_t*> mrs;
  chorus_algo_env_v2_t env{};

  explicit FakeEnv(size_t n_slots) {
    tp.struct_size = sizeof(tp);
    tp.post_send = post_send;
    tp.post_recv = post_recv;
    tp.last_error = last_error;
    mem.assign(n_slots, std::vector<char>(4096));
    for (auto& m : mem) slots.push_back(m.data());
    mrs.assign(n_slots, nullptr);
    env.struct_size = sizeof(env);
    env.tp = &tp;
    env.staging_slots = n_slots;
    env.staging_slot_size = 4096;
    env.staging = slots.data();
    env.staging_mr = mrs.data();
    env.fail = [](void*, int status, const char* message) {
      g_failed = message;
      return status;
    };
  }
};

}  // namespace

TEST_CASE("sdk: try_post tells AGAIN from a failure and names the peer", "[sdk]") {
  FakeEnv f(1);
  char byte = 0;
  g_failed.clear();
  g_next_rc = CHORUS_OK;
  CHECK(try_post(&f.env, true, nullptr, 3, &byte, 1, nullptr, 42) == CHORUS_OK);
  CHECK(g_last_wr == 42);
  g_next_rc = CHORUS_ERR_AGAIN;
  CHECK(try_post(&f.env, false, nullptr, 3, &byte, 1, nullptr, 43) == CHORUS_ERR_AGAIN);
  CHECK(g_failed.empty());  // AGAIN is not a failure: nothing recorded
  g_next_rc = CHORUS_ERR_PEER_LOST;
  CHECK(try_post(&f.env, false, nullptr, 5, &byte, 1, nullptr, 44) == CHORUS_ERR_PEER_LOST);
  CHECK(g_failed == "posting a receive from rank 5 failed: queue pair in error state");
  CHECK(try_post(&f.env, true, nullptr, 2, &byte, 1, nullptr, 45, "ring") == CHORUS_ERR_PEER_LOST);
  CHECK(g_failed == "ring: posting a send to rank 2 failed: queue pair in error state");
  g_next_rc = CHORUS_OK;
}

TEST_CASE("sdk: LaneWrId packs direction, lane and sequence inside the task's bits", "[sdk]") {
  constexpr uint64_t wr = LaneWrId::pack(true, 4095, LaneWrId::kSeqMask);
  static_assert((wr & ~CHORUS_ALGO_WR_ID_MASK) == 0, "the core's top 8 bits stay clear");
  CHECK(LaneWrId::is_send(wr));
  CHECK(LaneWrId::lane(wr) == 4095);
  CHECK(LaneWrId::seq(wr) == LaneWrId::kSeqMask);
  const uint64_t r = LaneWrId::pack(false, 7, 123456789);
  CHECK_FALSE(LaneWrId::is_send(r));
  CHECK(LaneWrId::lane(r) == 7);
  CHECK(LaneWrId::seq(r) == 123456789);
  // Every (direction, lane, seq) differs from its neighbours.
  std::set<uint64_t> seen;
  for (int send = 0; send < 2; ++send)
    for (uint32_t lane = 0; lane < 4; ++lane)
      for (uint64_t seq = 0; seq < 4; ++seq) seen.insert(LaneWrId::pack(send, lane, seq));
  CHECK(seen.size() == 32);
}

TEST_CASE("sdk: Flow opens while posts remain and the window has room", "[sdk]") {
  CHECK(Flow::window_for(8, 0) == 1);  // a cap of 0 counts as 1
  CHECK(Flow::window_for(8, 3) == 3);
  CHECK(Flow::window_for(2, 64) == 2);
  Flow f;
  f.total = 5;
  f.window = 2;
  CHECK(f.open());
  f.posted = 2;
  CHECK_FALSE(f.open());  // window full
  CHECK(f.outstanding() == 2);
  f.done = 1;
  CHECK(f.open());
  f.posted = 5;
  f.done = 4;
  CHECK_FALSE(f.open());  // nothing left to post
  CHECK_FALSE(f.finished());
  f.done = 5;
  CHECK(f.finished());
}

TEST_CASE("sdk: SlotPool shares cut the slots alike and recycle the last released", "[sdk]") {
  FakeEnv f(7);
  SlotPool a = SlotPool::share(&f.env, 3, 0), c = SlotPool::share(&f.env, 3, 2);
  CHECK(a.capacity() == 2);  // 7 / 3: slot 6 stays unused
  CHECK(c.capacity() == 2);
  const size_t s1 = c.acquire(), s2 = c.acquire();
  CHECK(std::set<size_t>{s1, s2} == std::set<size_t>{4, 5});
  CHECK(c.empty());
  CHECK(c.data(s1) == f.slots[s1]);
  c.release(s1);
  CHECK(c.acquire() == s1);
  CHECK(a.acquire() < 2);
  CHECK(a.slot_size() == 4096);
}

TEST_CASE("sdk: PostedQueue keeps post order across wrap-around", "[sdk]") {
  PostedQueue<int> q(3);
  int next_in = 0, next_out = 0;
  for (int round = 0; round < 10; ++round) {
    while (!q.full()) q.push(next_in++);
    CHECK(q.size() == 3);
    CHECK(q.front() == next_out);
    CHECK(q.pop() == next_out++);
    CHECK(q.pop() == next_out++);
  }
  while (!q.empty()) CHECK(q.pop() == next_out++);
  CHECK(next_out == next_in);
}

TEST_CASE("sdk: ScratchPool reuses buffers and drops those grown out of", "[sdk]") {
  ScratchPool pool;
  bool ok = false;
  std::byte* first = nullptr;
  {
    auto lease = pool.take(1000, ok);
    REQUIRE(ok);
    REQUIRE(lease.data() != nullptr);
    CHECK(lease.capacity() == 1000);
    first = lease.data();
  }
  CHECK(pool.idle() == 1);
  {
    auto lease = pool.take(600, ok);  // fits the idle one: reused
    CHECK(lease.data() == first);
    CHECK(pool.idle() == 0);
    auto other = pool.take(600, ok);  // none idle: a new one
    CHECK(other.data() != first);
  }
  CHECK(pool.idle() == 2);
  {
    auto big = pool.take(5000, ok);  // larger than both: they are let go
    CHECK(pool.idle() == 0);
    ScratchPool::Lease moved = std::move(big);
    CHECK(moved.capacity() == 5000);
    CHECK(big.data() == nullptr);
  }
  CHECK(pool.idle() == 1);
  auto none = pool.take(0, ok);
  CHECK(ok);
  CHECK(none.data() == nullptr);
}

TEST_CASE("sdk: ScratchPool lends to several threads at once", "[sdk]") {
  ScratchPool pool;
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&pool, &wrong, t] {
      for (int i = 0; i < 200; ++i) {
        bool ok = false;
        auto lease = pool.take(size_t(4096 + 512 * ((i + t) % 4)), ok);
        if (!ok) {
          ++wrong[size_t(t)];
          continue;
        }
        // Each lease is this thread's alone: fill it and read it back.
        for (size_t k = 0; k < 4096; ++k) lease.data()[k] = std::byte(t + 1);
        for (size_t k = 0; k < 4096; ++k)
          if (lease.data()[k] != std::byte(t + 1)) ++wrong[size_t(t)];
      }
    });
  for (auto& th : threads) th.join();
  for (int w : wrong) CHECK(w == 0);
  CHECK(pool.idle() <= ScratchPool::kKeepIdle);
  CHECK(pool.idle() >= 1);
}

TEST_CASE("sdk: in_place_post_bytes is a slot unless the transport takes large posts", "[sdk]") {
  FakeEnv f(1);  // slots of 4096 bytes
  chorus_tp_caps_t caps{};
  caps.struct_size = sizeof caps;
  f.env.caps = nullptr;
  CHECK(in_place_post_bytes(&f.env) == 4096);
  f.env.caps = &caps;
  CHECK(in_place_post_bytes(&f.env) == 4096);  // no bit, no limit
  caps.flags = CHORUS_TP_CAP_IMM_DATA;
  CHECK(in_place_post_bytes(&f.env) == 4096);
  caps.flags |= CHORUS_TP_CAP_LARGE_POSTS;
  CHECK(in_place_post_bytes(&f.env) == kLargePostBytes);
  CHECK(kLargePostBytes == size_t(16) << 20);
  caps.max_message_size = 100000;  // the transport's limit wins
  CHECK(in_place_post_bytes(&f.env) == 100000);
  caps.max_message_size = 1000;  // even below a slot
  CHECK(in_place_post_bytes(&f.env) == 1000);
  caps.max_message_size = 0;                   // 0: no limit stated
  f.env.staging_slot_size = size_t(32) << 20;  // slots larger than the large post stay
  CHECK(in_place_post_bytes(&f.env) == size_t(32) << 20);
}
