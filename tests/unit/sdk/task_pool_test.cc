// sdk::TaskPool and Entry's use of it (<chorus/algorithm_sdk.hpp>, C++17): a
// finished task's memory serves the next task, tasks alive at once get their
// own memory, every task is constructed and destroyed exactly once, and an
// algorithm without a pool keeps plain new and delete.
#include <catch2/catch.hpp>

#include <chorus/algorithm_sdk.hpp>

#include <set>

using namespace chorus::sdk;

namespace {

int g_alive = 0;        // tasks constructed and not yet destroyed
int g_constructed = 0;  // every construction
int g_last_count = -1;  // the call count the last task saw

template <bool kWithPool>
struct FakeAlgo;

template <>
struct FakeAlgo<true> {
  static constexpr const char* kName = "fake";
  mutable TaskPool task_pool;
  struct Task {
    Task(const FakeAlgo&, const chorus_algo_env_v2_t*, const chorus_algo_call_v2_t& call)
        : count(call.count) {
      ++g_alive, ++g_constructed;
      g_last_count = int(count);
    }
    ~Task() { --g_alive; }
    int start() { return CHORUS_ALGO_TASK_PENDING; }
    size_t count;
  };
};

template <>
struct FakeAlgo<false> {
  static constexpr const char* kName = "fake";
  struct Task {
    Task(const FakeAlgo&, const chorus_algo_env_v2_t*, const chorus_algo_call_v2_t& call) {
      ++g_alive, ++g_constructed;
      g_last_count = int(call.count);
    }
    ~Task() { --g_alive; }
    int start() { return CHORUS_ALGO_TASK_PENDING; }
  };
};

chorus_algo_call_v2_t call_of(size_t count) {
  chorus_algo_call_v2_t c{};
  c.struct_size = sizeof(c);
  c.count = count;
  return c;
}

}  // namespace

TEST_CASE("Entry reuses a finished task's memory from the algorithm's TaskPool", "[sdk]") {
  using E = Entry<FakeAlgo<true>>;
  STATIC_REQUIRE(E::kPooled);
  FakeAlgo<true> algo;
  chorus_algo_env_v2_t env{};
  g_alive = g_constructed = 0;

  chorus_algo_call_v2_t c1 = call_of(7);
  chorus_algo_task_v2_t* t1 = nullptr;
  REQUIRE(E::post(&algo, &env, &c1, &t1) == CHORUS_ALGO_TASK_PENDING);
  REQUIRE(t1 != nullptr);
  REQUIRE(g_last_count == 7);
  REQUIRE(reinterpret_cast<FakeAlgo<true>::Task*>(t1)->count == 7);
  E::task_free(t1);
  REQUIRE(g_alive == 0);

  // The next task lands in the same memory, freshly constructed.
  chorus_algo_call_v2_t c2 = call_of(9);
  chorus_algo_task_v2_t* t2 = nullptr;
  REQUIRE(E::post(&algo, &env, &c2, &t2) == CHORUS_ALGO_TASK_PENDING);
  REQUIRE(t2 == t1);
  REQUIRE(reinterpret_cast<FakeAlgo<true>::Task*>(t2)->count == 9);
  REQUIRE(g_alive == 1);

  // A task posted while t2 is alive gets memory of its own.
  chorus_algo_call_v2_t c3 = call_of(11);
  chorus_algo_task_v2_t* t3 = nullptr;
  REQUIRE(E::post(&algo, &env, &c3, &t3) == CHORUS_ALGO_TASK_PENDING);
  REQUIRE(t3 != nullptr);
  REQUIRE(t3 != t2);
  REQUIRE(reinterpret_cast<FakeAlgo<true>::Task*>(t3)->count == 11);
  REQUIRE(reinterpret_cast<FakeAlgo<true>::Task*>(t2)->count == 9);
  REQUIRE(g_alive == 2);
  // Both go back: one block is kept, the other freed (ASan would see a leak
  // or a double free here).
  E::task_free(t2);
  E::task_free(t3);
  E::task_free(nullptr);
  REQUIRE(g_alive == 0);
  REQUIRE(g_constructed == 3);
}

TEST_CASE("Entry without a TaskPool allocates every task", "[sdk]") {
  using E = Entry<FakeAlgo<false>>;
  STATIC_REQUIRE(!E::kPooled);
  FakeAlgo<false> algo;
  chorus_algo_env_v2_t env{};
  g_alive = g_constructed = 0;
  std::set<chorus_algo_task_v2_t*> live;
  for (size_t i = 0; i < 3; ++i) {
    chorus_algo_call_v2_t c = call_of(i);
    chorus_algo_task_v2_t* t = nullptr;
    REQUIRE(E::post(&algo, &env, &c, &t) == CHORUS_ALGO_TASK_PENDING);
    REQUIRE(g_last_count == int(i));
    live.insert(t);
  }
  REQUIRE(live.size() == 3);
  REQUIRE(g_alive == 3);
  for (auto* t : live) E::task_free(t);
  REQUIRE(g_alive == 0);
}

TEST_CASE("TaskPool keeps one block and hands it out once", "[sdk]") {
  TaskPool pool;
  void* a = pool.take(64);
  void* b = pool.take(64);
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  REQUIRE(a != b);
  pool.give_back(a);
  pool.give_back(b);  // one is kept already: b is freed
  REQUIRE(pool.take(64) == a);
  void* c = pool.take(64);  // the slot is empty again: fresh memory
  REQUIRE(c != a);
  pool.give_back(c);
  ::operator delete(a);
}
