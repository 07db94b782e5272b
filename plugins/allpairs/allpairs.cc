// An all_reduce written against the algorithm ABI v2 with the algorithm SDK
// (<chorus/algorithm_sdk.hpp>), as a third party writes one: every rank
// sends its whole input to every peer, and every rank reduces the inputs in
// rank order, so that the results are bitwise identical on every rank and
// every run. It moves (size - 1) times the data of a ring, which pays off
// only for small messages: it says so through its preference, and `auto`
// weighs that against the built-ins.
//
// What it shows of v2 (docs/plugins.md, "Algorithm ABI v2"):
//   comm_init   checks the settings (one key, max_bytes) and keeps them;
//   supports    declares the ops it has (sum, min, max: not prod);
//   preference  sees the whole call;
//   Task        start() posts and returns; progress() takes the task's own
//               completions and says when the task is done.
#include <chorus/algorithm_sdk.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

namespace {

using chorus::sdk::fail;
using chorus::sdk::WrId;

constexpr size_t kMaxChunk = 1u << 20;

struct AllPairs {
  static constexpr const char* kName = "allpairs";
  static constexpr uint32_t kFlags =
      CHORUS_ALGO_DETERMINISTIC_ACROSS_RANKS | CHORUS_ALGO_DETERMINISTIC_ACROSS_RUNS;
  static constexpr uint32_t kCollectives = 1u << CHORUS_COLL_ALL_REDUCE;

  uint64_t max_bytes = 64 * 1024;  // largest all_reduce `auto` may give it

  /// Settings are checked here, at communicator init: a bad one fails init.
  static int comm_init(const chorus_algo_comm_v2_t* comm, AllPairs** out) {
    auto* a = new (std::nothrow) AllPairs;
    if (!a) return comm->fail(comm->core, CHORUS_ERR_SYSTEM, "allpairs: out of memory");
    for (size_t i = 0; i < comm->config_count; ++i) {
      const chorus_kv_t& kv = comm->config[i];
      const std::string key = kv.key, value = kv.value, origin = kv.origin ? kv.origin : "?";
      std::string error;
      if (key != "max_bytes") {
        error = "unknown setting '" + key + "' (from " + origin + "); the only one is max_bytes";
      } else {
        char* end = nullptr;
        errno = 0;
        a->max_bytes = std::strtoull(value.c_str(), &end, 10);
        if (value.empty() || value[0] == '-' || *end != '\0' || errno != 0)
          error =
              "max_bytes = '" + value + "' (from " + origin + ") is not a whole number of bytes";
      }
      if (!error.empty()) {
        delete a;
        return comm->fail(comm->core, CHORUS_ERR_INVALID_ARGUMENT, ("allpairs: " + error).c_str());
      }
    }
    *out = a;
    return CHORUS_OK;
  }

  bool supports(int collective, int, int op) const {
    return collective == CHORUS_COLL_ALL_REDUCE &&
           (op == CHORUS_SUM || op == CHORUS_MIN || op == CHORUS_MAX);
  }

  int preference(const chorus_algo_call_v2_t& call) const {
    return call.bytes <= max_bytes ? 1000 : -1;
  }

  /// One all_reduce: receives from every peer into its slot, sends this
  /// rank's slot to every peer, then reduces slot 0, 1, ... into `out`.
  struct Task {
    Task(const AllPairs&, const chorus_algo_env_v2_t* env, const chorus_algo_call_v2_t& call)
        : env(env), call(call), poster(env), bytes(call.count * chorus_dtype_size(call.dtype)) {}
    ~Task() { std::free(slots); }

    int start() {
      if (bytes == 0) return CHORUS_ALGO_TASK_DONE;
      const size_t n = size_t(env->size);
      slots = static_cast<std::byte*>(std::malloc(bytes * n));
      if (!slots) return fail(env, CHORUS_ERR_SYSTEM, "allpairs: out of memory");
      // Its own input is copied first: `out` may be `in`, and is written last.
      std::memcpy(slot(env->rank), call.in, bytes);
      chorus_tp_mr_t* mr = nullptr;
      if (int rc = env->mem_register(env->core, slots, bytes * n, &mr); rc != CHORUS_OK) return rc;
      const uint64_t max_msg = env->caps->max_message_size;
      chunk = size_t(std::min<uint64_t>(kMaxChunk, max_msg ? max_msg : kMaxChunk));
      for (int send = 0; send < 2; ++send)
        for (int k = 1; k < env->size; ++k) {
          const int peer = (env->rank + k) % env->size;
          for (size_t off = 0, i = 0; off < bytes; off += chunk, ++i) {
            const size_t len = std::min(chunk, bytes - off);
            if (send)
              poster.send(peer, 0, slot(env->rank) + off, len, mr, i);
            else
              poster.recv(peer, 0, slot(peer) + off, len, mr, i);
          }
        }
      return step();
    }

    int progress(const chorus_tp_completion_t* c, size_t n) {
      for (size_t i = 0; i < n; ++i) {
        const size_t want = std::min(chunk, bytes - WrId::index(c[i].wr_id) * chunk);
        if (!WrId::is_send(c[i].wr_id) && c[i].byte_len != want)
          return fail(env, CHORUS_ERR_INVALID_ARGUMENT,
                      "allpairs: rank " + std::to_string(WrId::peer(c[i].wr_id)) + " sent " +
                          std::to_string(c[i].byte_len) + " bytes where " + std::to_string(want) +
                          " were expected");
      }
      poster.completed(n);
      return step();
    }

   private:
    std::byte* slot(int r) const { return slots + size_t(r) * bytes; }

    int step() {
      if (int rc = poster.pump(); rc != CHORUS_OK) return rc;
      if (!poster.done()) return CHORUS_ALGO_TASK_PENDING;
      chorus_reduce_fn_t kernel = env->reduce_kernel(call.dtype, call.op);
      std::memcpy(call.out, slot(0), bytes);
      for (int r = 1; r < env->size; ++r) kernel(slot(r), call.out, call.count);
      return CHORUS_ALGO_TASK_DONE;
    }

    const chorus_algo_env_v2_t* env;
    chorus_algo_call_v2_t call;
    chorus::sdk::Poster poster;
    size_t bytes, chunk = 0;
    std::byte* slots = nullptr;
  };
};

}  // namespace

CHORUS_ALGORITHM_EXPORT_V2(AllPairs);
