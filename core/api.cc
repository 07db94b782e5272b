// The C host API: thin wrappers that turn Status into a return code plus the
// per-thread last-error text, and never let an exception out.
#include <chorus/chorus.h>

#include "core/communicator.h"
#include "core/config.h"
#include "core/log.h"
#include "core/transport_probe.h"

#include <chrono>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

#define CHORUS_API extern "C" __attribute__((visibility("default")))

struct chorus_comm {
  std::unique_ptr<chorus::core::Communicator> impl;
};

struct chorus_request {
  std::shared_ptr<chorus::core::Request> impl;
  chorus::core::Communicator* comm;  // only used while impl is not done
  /// The communicator's wait.request_ns, alive even after it is finalized.
  std::shared_ptr<std::atomic<uint64_t>> wait_ns;
};

namespace {

thread_local std::string t_last_error;

/// Handles the API gave out and has not yet taken back: communicators from
/// chorus_comm_init / chorus_comm_split until chorus_comm_finalize, requests
/// from the i-calls until chorus_request_free. Every call checks its handle
/// here first, so finalizing or freeing twice, or using a handle afterwards,
/// is an argument error instead of a use after free. (A handle whose address
/// a later one reuses cannot be told apart.)
template <class T>
class LiveHandles {
 public:
  T* remember(T* h) {
    std::lock_guard lock(mu_);
    set_.insert(h);
    return h;
  }
  /// Takes `h` out of the live set; false if it was not there.
  bool forget(const T* h) {
    std::lock_guard lock(mu_);
    return set_.erase(h) == 1;
  }
  bool live(const T* h) {
    std::lock_guard lock(mu_);
    return set_.count(h) == 1;
  }

 private:
  std::mutex mu_;
  std::unordered_set<const T*> set_;
};
LiveHandles<chorus_comm>& live_comms() {
  static auto* l = new LiveHandles<chorus_comm>;  // never destroyed: finalize may run at exit
  return *l;
}
LiveHandles<chorus_request>& live_requests() {
  static auto* l = new LiveHandles<chorus_request>;
  return *l;
}
chorus_comm* remember(chorus_comm* c) { return live_comms().remember(c); }
bool forget(const chorus_comm* c) { return live_comms().forget(c); }
bool live(const chorus_comm* c) { return c && live_comms().live(c); }
bool live(const chorus_request* r) { return r && live_requests().live(r); }

constexpr const char* kNotLiveComm =
    ": not a live communicator (already finalized, or not a handle from chorus_comm_init / "
    "chorus_comm_split)";
constexpr const char* kNotLiveRequest =
    ": not a live request (already freed with chorus_request_free, or not a request from a "
    "chorus_i* call)";

int set_error(const chorus::core::Status& st) {
  if (st.is_ok()) return CHORUS_OK;
  t_last_error = st.message();
  return st.code();
}

int invalid(const std::string& message) {
  t_last_error = message;
  return CHORUS_ERR_INVALID_ARGUMENT;
}

/// The argument error for a NULL or dead communicator handle; OK when live.
int check_comm(const chorus_comm* comm, const std::string& caller) {
  if (!comm) return invalid(caller + ": comm is NULL");
  if (!live(comm)) return invalid(caller + kNotLiveComm);
  return CHORUS_OK;
}

/// Runs `body` and converts any escaping exception to a status.
template <class F>
int guarded(F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    t_last_error = "out of memory";
    return CHORUS_ERR_SYSTEM;
  } catch (const std::exception& e) {
    t_last_error = std::string("internal error: ") + e.what();
    return CHORUS_ERR_INTERNAL;
  } catch (...) {
    t_last_error = "internal error: unknown exception";
    return CHORUS_ERR_INTERNAL;
  }
}

constexpr const char* kDtypeNames[CHORUS_DTYPE_COUNT] = {
    "bool",   "int8",   "int16",   "int32",    "int64",   "uint8",   "uint16",
    "uint32", "uint64", "float16", "bfloat16", "float32", "float64", "complex64"};
constexpr const char* kOpNames[CHORUS_OP_COUNT] = {"sum", "prod", "max", "min"};
constexpr const char* kCollNames[CHORUS_COLL_COUNT] = {
    "all_reduce", "all_gather", "reduce_scatter", "broadcast",  "barrier",
    "reduce",     "gather",     "scatter",        "all_to_all", "all_to_allv"};

}  // namespace

CHORUS_API void chorus_options_init(chorus_options_t* opts) {
  if (!opts) return;
  std::memset(opts, 0, sizeof(*opts));
  opts->struct_size = sizeof(*opts);
  opts->rank = -1;
  opts->size = -1;
}

namespace {

/// The configuration sources `opts` adds to the environment (NULL: none).
/// INVALID_ARGUMENT, naming `caller`, for malformed options.
chorus::core::Status config_inputs(const chorus_options_t* opts, const char* caller,
                                   chorus::core::ConfigInputs& in) {
  using chorus::core::Status;
  in.env = chorus::core::environment_map();
  if (!opts) return Status::ok();
  const std::string who(caller);
  if (opts->struct_size < offsetof(chorus_options_t, settings_count) + sizeof(size_t))
    return {CHORUS_ERR_INVALID_ARGUMENT,
            who + ": options.struct_size is too small; call chorus_options_init first"};
  if (opts->config_path) in.api_config_path = opts->config_path;
  for (size_t i = 0; i < opts->settings_count; ++i) {
    if (!opts->settings || !opts->settings[i])
      return {CHORUS_ERR_INVALID_ARGUMENT, who + ": settings[" + std::to_string(i) + "] is NULL"};
    in.api_settings.emplace_back(opts->settings[i]);
  }
  if (opts->rank >= 0) in.api_settings.push_back("bootstrap.rank=" + std::to_string(opts->rank));
  if (opts->size > 0)
    in.api_settings.push_back("bootstrap.world_size=" + std::to_string(opts->size));
  if (opts->coordinator) {
    std::string c = opts->coordinator;
    if (c.find('"') != std::string::npos || c.find('\\') != std::string::npos)
      return {CHORUS_ERR_INVALID_ARGUMENT, who + ": coordinator contains a quote or backslash"};
    in.api_settings.push_back("bootstrap.coordinator=\"" + c + "\"");
  }
  return Status::ok();
}

}  // namespace

CHORUS_API int chorus_transport_probe(const chorus_options_t* opts) {
  return guarded([&] {
    chorus::core::ConfigInputs in;
    if (auto st = config_inputs(opts, "chorus_transport_probe", in); !st.is_ok())
      return set_error(st);
    auto cfg = chorus::core::load_config(in);
    if (!cfg.is_ok()) return set_error(cfg.status());
    return set_error(chorus::core::probe_transport(*cfg, cfg->transport));
  });
}

CHORUS_API int chorus_config_get(const chorus_options_t* opts, const char* key, char* value,
                                 size_t value_len, char* origin, size_t origin_len) {
  return guarded([&] {
    if (!key) return invalid("chorus_config_get: key is NULL");
    if ((!value && value_len) || (!origin && origin_len))
      return invalid("chorus_config_get: a NULL buffer needs length 0");
    chorus::core::ConfigInputs in;
    if (auto st = config_inputs(opts, "chorus_config_get", in); !st.is_ok()) return set_error(st);
    auto cfg = chorus::core::load_config(in);
    if (!cfg.is_ok()) return set_error(cfg.status());
    std::string v, o;
    if (auto it = cfg->origins.find(key); it != cfg->origins.end()) {
      o = it->second;
      if (auto vt = cfg->values.find(key); vt != cfg->values.end()) v = vt->second;
    }
    auto put = [](const std::string& text, char* buf, size_t len) {
      if (!buf) return true;
      if (text.size() >= len) return false;
      std::memcpy(buf, text.c_str(), text.size() + 1);
      return true;
    };
    if (!put(v, value, value_len))
      return invalid("chorus_config_get: the value of '" + std::string(key) + "' needs " +
                     std::to_string(v.size() + 1) + " bytes, the buffer has " +
                     std::to_string(value_len));
    if (!put(o, origin, origin_len))
      return invalid("chorus_config_get: the origin of '" + std::string(key) + "' needs " +
                     std::to_string(o.size() + 1) + " bytes, the buffer has " +
                     std::to_string(origin_len));
    return int(CHORUS_OK);
  });
}

CHORUS_API int chorus_comm_init(const chorus_options_t* opts, chorus_comm_t** comm_out) {
  return guarded([&] {
    if (!comm_out) return invalid("chorus_comm_init: comm_out is NULL");
    chorus::core::ConfigInputs in;
    if (auto st = config_inputs(opts, "chorus_comm_init", in); !st.is_ok()) return set_error(st);
    auto cfg = chorus::core::load_config(in);
    if (!cfg.is_ok()) return set_error(cfg.status());
    std::unique_ptr<chorus::core::SideChannel> host_channel;
    if (opts && opts->struct_size >= offsetof(chorus_options_t, bootstrap_ctx) + sizeof(void*) &&
        opts->allgather) {
      if (cfg->rank < 0 || cfg->world_size < 1)
        return invalid("chorus_comm_init: a host all-gather needs rank and size (options or CHORUS_RANK/CHORUS_WORLD_SIZE)");
      host_channel = std::make_unique<chorus::core::HostSideChannel>(
          cfg->rank, cfg->world_size, opts->allgather, opts->barrier, opts->bootstrap_ctx);
    }
    auto comm = chorus::core::Communicator::create(std::move(*cfg), std::move(host_channel));
    if (!comm.is_ok()) return set_error(comm.status());
    auto* handle = remember(new chorus_comm{std::move(*comm)});
    *comm_out = handle;
    return int(CHORUS_OK);
  });
}

CHORUS_API int chorus_comm_finalize(chorus_comm_t* comm) {
  return guarded([&] {
    if (comm && !forget(comm)) return invalid(std::string("chorus_comm_finalize") + kNotLiveComm);
    delete comm;
    return int(CHORUS_OK);
  });
}

CHORUS_API int chorus_comm_abort(chorus_comm_t* comm) {
  if (int rc = check_comm(comm, "chorus_comm_abort"); rc != CHORUS_OK) return rc;
  comm->impl->abort();
  return CHORUS_OK;
}

CHORUS_API int chorus_comm_rank(const chorus_comm_t* comm, int* rank_out) {
  if (!rank_out) return invalid("chorus_comm_rank: rank_out is NULL");
  if (int rc = check_comm(comm, "chorus_comm_rank"); rc != CHORUS_OK) return rc;
  *rank_out = comm->impl->rank();
  return CHORUS_OK;
}

CHORUS_API int chorus_comm_size(const chorus_comm_t* comm, int* size_out) {
  if (!size_out) return invalid("chorus_comm_size: size_out is NULL");
  if (int rc = check_comm(comm, "chorus_comm_size"); rc != CHORUS_OK) return rc;
  *size_out = comm->impl->size();
  return CHORUS_OK;
}

CHORUS_API const char* chorus_comm_algorithm(const chorus_comm_t* comm, int collective,
                                             uint64_t bytes) {
  if (!live(comm)) return nullptr;
  const auto* a = comm->impl->choose(collective, bytes);
  return a ? a->name : nullptr;
}

CHORUS_API const char* chorus_comm_transport(const chorus_comm_t* comm) {
  return live(comm) ? comm->impl->transport_name().c_str() : nullptr;
}

#define CHORUS_COMM_CALL(name, expr)                                 \
  return guarded([&] {                                               \
    if (int rc = check_comm(comm, name); rc != CHORUS_OK) return rc; \
    return set_error(expr);                                          \
  })

namespace {

using chorus::core::Communicator;
using chorus::core::Status;

/// Blocking call: argument check on the caller, then the operation in issue
/// order behind every earlier request.
template <class Body>
Status run_blocking(Communicator& c, const char* what, const Status& checked, Body body) {
  if (!checked.is_ok()) {
    c.count_failed();
    return checked;
  }
  return c.execute(what, std::move(body));
}

/// Non-blocking call: argument check on the caller, then queue. `check`
/// runs only once `comm` is known to be a live handle.
template <class Check, class Body>
int issue(chorus_comm_t* comm, const char* name, const char* what, chorus_request_t** req_out,
          Check check, Body body) {
  return guarded([&] {
    if (int rc = check_comm(comm, name); rc != CHORUS_OK) return rc;
    if (!req_out) {
      comm->impl->count_failed();
      return invalid(std::string(name) + ": req_out is NULL");
    }
    if (const Status checked = check(); !checked.is_ok()) {
      comm->impl->count_failed();
      return set_error(checked);
    }
    auto* handle =
        new chorus_request{nullptr, comm->impl.get(), comm->impl->request_wait_counter()};
    handle->impl = comm->impl->submit(what, std::move(body));
    *req_out = live_requests().remember(handle);
    return int(CHORUS_OK);
  });
}

}  // namespace

CHORUS_API int chorus_all_reduce(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                 int dtype, int op) {
  CHORUS_COMM_CALL("chorus_all_reduce",
                   run_blocking(*comm->impl, "all_reduce",
                                comm->impl->check_all_reduce(in, out, count, dtype, op),
                                [=](Communicator& c) { return c.all_reduce(in, out, count, dtype, op); }));
}

CHORUS_API int chorus_all_gather(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                 int dtype) {
  CHORUS_COMM_CALL("chorus_all_gather",
                   run_blocking(*comm->impl, "all_gather",
                                comm->impl->check_all_gather(in, out, count, dtype),
                                [=](Communicator& c) { return c.all_gather(in, out, count, dtype); }));
}

CHORUS_API int chorus_reduce_scatter(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                     int dtype, int op) {
  CHORUS_COMM_CALL("chorus_reduce_scatter",
                   run_blocking(*comm->impl, "reduce_scatter",
                                comm->impl->check_reduce_scatter(in, out, count, dtype, op),
                                [=](Communicator& c) {
                                  return c.reduce_scatter(in, out, count, dtype, op);
                                }));
}

CHORUS_API int chorus_broadcast(chorus_comm_t* comm, void* buf, size_t count, int dtype, int root) {
  CHORUS_COMM_CALL("chorus_broadcast",
                   run_blocking(*comm->impl, "broadcast",
                                comm->impl->check_broadcast(buf, count, dtype, root),
                                [=](Communicator& c) { return c.broadcast(buf, count, dtype, root); }));
}

CHORUS_API int chorus_barrier(chorus_comm_t* comm) {
  CHORUS_COMM_CALL("chorus_barrier", run_blocking(*comm->impl, "barrier", Status::ok(),
                                                  [](Communicator& c) { return c.barrier(); }));
}

CHORUS_API int chorus_send(chorus_comm_t* comm, const void* buf, size_t count, int dtype, int peer) {
  CHORUS_COMM_CALL("chorus_send",
                   run_blocking(*comm->impl, "send", comm->impl->check_p2p("send", buf, count, dtype, peer),
                                [=](Communicator& c) { return c.send(buf, count, dtype, peer); }));
}

CHORUS_API int chorus_recv(chorus_comm_t* comm, void* buf, size_t count, int dtype, int peer) {
  CHORUS_COMM_CALL("chorus_recv",
                   run_blocking(*comm->impl, "recv", comm->impl->check_p2p("recv", buf, count, dtype, peer),
                                [=](Communicator& c) { return c.recv(buf, count, dtype, peer); }));
}

CHORUS_API int chorus_reduce(chorus_comm_t* comm, const void* in, void* out, size_t count,
                             int dtype, int op, int root) {
  CHORUS_COMM_CALL(
      "chorus_reduce",
      run_blocking(*comm->impl, "reduce", comm->impl->check_reduce(in, out, count, dtype, op, root),
                   [=](Communicator& c) { return c.reduce(in, out, count, dtype, op, root); }));
}

CHORUS_API int chorus_gather(chorus_comm_t* comm, const void* in, void* out, size_t count,
                             int dtype, int root) {
  CHORUS_COMM_CALL(
      "chorus_gather",
      run_blocking(*comm->impl, "gather", comm->impl->check_gather(in, out, count, dtype, root),
                   [=](Communicator& c) { return c.gather(in, out, count, dtype, root); }));
}

CHORUS_API int chorus_scatter(chorus_comm_t* comm, const void* in, void* out, size_t count,
                              int dtype, int root) {
  CHORUS_COMM_CALL(
      "chorus_scatter",
      run_blocking(*comm->impl, "scatter", comm->impl->check_scatter(in, out, count, dtype, root),
                   [=](Communicator& c) { return c.scatter(in, out, count, dtype, root); }));
}

CHORUS_API int chorus_all_to_all(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                 int dtype) {
  CHORUS_COMM_CALL(
      "chorus_all_to_all",
      run_blocking(*comm->impl, "all_to_all", comm->impl->check_all_to_all(in, out, count, dtype),
                   [=](Communicator& c) { return c.all_to_all(in, out, count, dtype); }));
}

CHORUS_API int chorus_all_to_allv(chorus_comm_t* comm, const void* in, const size_t* send_counts,
                                  const size_t* send_offsets, void* out, const size_t* recv_counts,
                                  const size_t* recv_offsets, int dtype) {
  CHORUS_COMM_CALL("chorus_all_to_allv",
                   run_blocking(*comm->impl, "all_to_allv",
                                comm->impl->check_all_to_allv(in, send_counts, send_offsets, out,
                                                              recv_counts, recv_offsets, dtype),
                                [=](Communicator& c) {
                                  return c.all_to_allv(in, send_counts, send_offsets, out,
                                                       recv_counts, recv_offsets, dtype);
                                }));
}

// The argument check of a non-blocking call, run by issue() once it has
// found `comm` live.
#define CHORUS_CHECK(expr) [&] { return comm->impl->expr; }

CHORUS_API int chorus_iall_reduce(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                  int dtype, int op, chorus_request_t** req_out) {
  return issue(comm, "chorus_iall_reduce", "all_reduce", req_out,
               CHORUS_CHECK(check_all_reduce(in, out, count, dtype, op)),
               [=](Communicator& c) { return c.all_reduce(in, out, count, dtype, op); });
}

CHORUS_API int chorus_iall_gather(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                  int dtype, chorus_request_t** req_out) {
  return issue(comm, "chorus_iall_gather", "all_gather", req_out,
               CHORUS_CHECK(check_all_gather(in, out, count, dtype)),
               [=](Communicator& c) { return c.all_gather(in, out, count, dtype); });
}

CHORUS_API int chorus_ireduce_scatter(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                      int dtype, int op, chorus_request_t** req_out) {
  return issue(comm, "chorus_ireduce_scatter", "reduce_scatter", req_out,
               CHORUS_CHECK(check_reduce_scatter(in, out, count, dtype, op)),
               [=](Communicator& c) { return c.reduce_scatter(in, out, count, dtype, op); });
}

CHORUS_API int chorus_ibroadcast(chorus_comm_t* comm, void* buf, size_t count, int dtype, int root,
                                 chorus_request_t** req_out) {
  return issue(comm, "chorus_ibroadcast", "broadcast", req_out,
               CHORUS_CHECK(check_broadcast(buf, count, dtype, root)),
               [=](Communicator& c) { return c.broadcast(buf, count, dtype, root); });
}

CHORUS_API int chorus_ireduce(chorus_comm_t* comm, const void* in, void* out, size_t count,
                              int dtype, int op, int root, chorus_request_t** req_out) {
  return issue(comm, "chorus_ireduce", "reduce", req_out,
               CHORUS_CHECK(check_reduce(in, out, count, dtype, op, root)),
               [=](Communicator& c) { return c.reduce(in, out, count, dtype, op, root); });
}

CHORUS_API int chorus_igather(chorus_comm_t* comm, const void* in, void* out, size_t count,
                              int dtype, int root, chorus_request_t** req_out) {
  return issue(comm, "chorus_igather", "gather", req_out,
               CHORUS_CHECK(check_gather(in, out, count, dtype, root)),
               [=](Communicator& c) { return c.gather(in, out, count, dtype, root); });
}

CHORUS_API int chorus_iscatter(chorus_comm_t* comm, const void* in, void* out, size_t count,
                               int dtype, int root, chorus_request_t** req_out) {
  return issue(comm, "chorus_iscatter", "scatter", req_out,
               CHORUS_CHECK(check_scatter(in, out, count, dtype, root)),
               [=](Communicator& c) { return c.scatter(in, out, count, dtype, root); });
}

CHORUS_API int chorus_iall_to_all(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                  int dtype, chorus_request_t** req_out) {
  return issue(comm, "chorus_iall_to_all", "all_to_all", req_out,
               CHORUS_CHECK(check_all_to_all(in, out, count, dtype)),
               [=](Communicator& c) { return c.all_to_all(in, out, count, dtype); });
}

CHORUS_API int chorus_iall_to_allv(chorus_comm_t* comm, const void* in, const size_t* send_counts,
                                   const size_t* send_offsets, void* out, const size_t* recv_counts,
                                   const size_t* recv_offsets, int dtype,
                                   chorus_request_t** req_out) {
  return guarded([&] {
    // The arrays are read here, before issue(): check the handle first.
    if (int err = check_comm(comm, "chorus_iall_to_allv"); err != CHORUS_OK) return err;
    const Status checked = comm->impl->check_all_to_allv(in, send_counts, send_offsets, out,
                                                         recv_counts, recv_offsets, dtype);
    // The host may reuse its count and offset arrays once this returns: the
    // request keeps its own copies (only read when the check passed).
    std::vector<size_t> sc, so, rc, ro;
    if (checked.is_ok()) {
      const size_t n = size_t(comm->impl->size());
      sc.assign(send_counts, send_counts + n);
      so.assign(send_offsets, send_offsets + n);
      rc.assign(recv_counts, recv_counts + n);
      ro.assign(recv_offsets, recv_offsets + n);
    }
    return issue(
        comm, "chorus_iall_to_allv", "all_to_allv", req_out, [&] { return checked; },
        [=, sc = std::move(sc), so = std::move(so), rc = std::move(rc),
         ro = std::move(ro)](Communicator& c) {
          return c.all_to_allv(in, sc.data(), so.data(), out, rc.data(), ro.data(), dtype);
        });
  });
}

CHORUS_API int chorus_ibarrier(chorus_comm_t* comm, chorus_request_t** req_out) {
  return issue(
      comm, "chorus_ibarrier", "barrier", req_out, [] { return Status::ok(); },
      [](Communicator& c) { return c.barrier(); });
}

CHORUS_API int chorus_isend(chorus_comm_t* comm, const void* buf, size_t count, int dtype, int peer,
                            chorus_request_t** req_out) {
  return issue(comm, "chorus_isend", "send", req_out,
               CHORUS_CHECK(check_p2p("send", buf, count, dtype, peer)),
               [=](Communicator& c) { return c.send(buf, count, dtype, peer); });
}

CHORUS_API int chorus_irecv(chorus_comm_t* comm, void* buf, size_t count, int dtype, int peer,
                            chorus_request_t** req_out) {
  return issue(comm, "chorus_irecv", "recv", req_out,
               CHORUS_CHECK(check_p2p("recv", buf, count, dtype, peer)),
               [=](Communicator& c) { return c.recv(buf, count, dtype, peer); });
}

CHORUS_API int chorus_test(chorus_request_t* req, int* done_out) {
  return guarded([&] {
    if (!req || !done_out) return invalid("chorus_test: NULL argument");
    if (!live(req)) return invalid(std::string("chorus_test") + kNotLiveRequest);
    if (!req->impl->done()) {
      *done_out = 0;
      return int(CHORUS_OK);
    }
    *done_out = 1;
    return set_error(req->impl->status());
  });
}

CHORUS_API int chorus_wait(chorus_request_t* req, int timeout_ms) {
  return guarded([&] {
    if (!req) return invalid("chorus_wait: req is NULL");
    if (!live(req)) return invalid(std::string("chorus_wait") + kNotLiveRequest);
    auto t0 = std::chrono::steady_clock::now();
    bool done = req->impl->wait_for(timeout_ms);
    uint64_t ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                               std::chrono::steady_clock::now() - t0)
                               .count());
    // Counted through the shared counter: a done request's communicator may
    // already be finalized.
    req->wait_ns->fetch_add(ns, std::memory_order_relaxed);
    if (!done) {
      t_last_error = "chorus_wait: " + req->impl->what() + " still pending after " +
                     std::to_string(timeout_ms) + " ms";
      return int(CHORUS_ERR_AGAIN);
    }
    return set_error(req->impl->status());
  });
}

CHORUS_API int chorus_request_free(chorus_request_t* req) {
  return guarded([&] {
    if (req && !live_requests().forget(req))
      return invalid(std::string("chorus_request_free") + kNotLiveRequest);
    delete req;
    return int(CHORUS_OK);
  });
}

CHORUS_API int chorus_cancel(chorus_request_t* req) {
  return guarded([&] {
    if (!req) return invalid("chorus_cancel: req is NULL");
    if (!live(req)) return invalid(std::string("chorus_cancel") + kNotLiveRequest);
    // A done request may belong to a finalized communicator: do not touch it.
    if (req->impl->done())
      return set_error({CHORUS_ERR_NOT_SUPPORTED,
                        "chorus_cancel: " + req->impl->what() +
                            " already complete; only a request that has not started can be cancelled"});
    return set_error(req->comm->cancel(req->impl));
  });
}

CHORUS_API int chorus_comm_split(chorus_comm_t* parent, int color, int key,
                                 chorus_comm_t** child_out) {
  return guarded([&] {
    if (!parent) return invalid("chorus_comm_split: parent is NULL");
    if (!live(parent)) return invalid(std::string("chorus_comm_split") + kNotLiveComm);
    if (!child_out) return invalid("chorus_comm_split: child_out is NULL");
    std::unique_ptr<Communicator> child;
    Status st = parent->impl->execute("split", [&](Communicator& c) -> Status {
      auto r = c.split(color, key);
      if (!r.is_ok()) return r.status();
      child = std::move(*r);
      return Status::ok();
    });
    if (!st.is_ok()) return set_error(st);
    *child_out = child ? remember(new chorus_comm{std::move(child)}) : nullptr;
    return int(CHORUS_OK);
  });
}

CHORUS_API const char* chorus_comm_id(const chorus_comm_t* comm) {
  return live(comm) ? comm->impl->id().c_str() : nullptr;
}

CHORUS_API int chorus_comm_counters(const chorus_comm_t* comm, chorus_counter_t* out, size_t max,
                                    size_t* count_out) {
  return guarded([&] {
    if (!count_out) return invalid("chorus_comm_counters: count_out is NULL");
    if (int rc = check_comm(comm, "chorus_comm_counters"); rc != CHORUS_OK) return rc;
    if (max > 0 && !out) return invalid("chorus_comm_counters: out is NULL with max > 0");
    auto all = comm->impl->counters();
    for (size_t i = 0; i < all.size() && i < max; ++i) {
      std::memset(out[i].name, 0, sizeof(out[i].name));
      std::strncpy(out[i].name, all[i].first.c_str(), sizeof(out[i].name) - 1);
      out[i].value = all[i].second;
    }
    *count_out = all.size();
    return int(CHORUS_OK);
  });
}

CHORUS_API const char* chorus_last_error(void) { return t_last_error.c_str(); }

CHORUS_API const char* chorus_status_name(int status) {
  switch (status) {
    case CHORUS_OK: return "CHORUS_OK";
    case CHORUS_ERR_INVALID_ARGUMENT: return "CHORUS_ERR_INVALID_ARGUMENT";
    case CHORUS_ERR_UNAVAILABLE: return "CHORUS_ERR_UNAVAILABLE";
    case CHORUS_ERR_TIMEOUT: return "CHORUS_ERR_TIMEOUT";
    case CHORUS_ERR_PEER_LOST: return "CHORUS_ERR_PEER_LOST";
    case CHORUS_ERR_SYSTEM: return "CHORUS_ERR_SYSTEM";
    case CHORUS_ERR_INTERNAL: return "CHORUS_ERR_INTERNAL";
    case CHORUS_ERR_ABORTED: return "CHORUS_ERR_ABORTED";
    case CHORUS_ERR_PENDING: return "CHORUS_ERR_PENDING";
    case CHORUS_ERR_AGAIN: return "CHORUS_ERR_AGAIN";
    case CHORUS_ERR_NOT_SUPPORTED: return "CHORUS_ERR_NOT_SUPPORTED";
    case CHORUS_ERR_MISMATCH:
      return "CHORUS_ERR_MISMATCH";
    default: return "CHORUS_ERR_UNKNOWN";
  }
}

CHORUS_API const char* chorus_dtype_name(int dtype) {
  return dtype >= 0 && dtype < CHORUS_DTYPE_COUNT ? kDtypeNames[dtype] : nullptr;
}

CHORUS_API int chorus_dtype_from_name(const char* name, int* dtype_out) {
  if (!name || !dtype_out) return invalid("chorus_dtype_from_name: NULL argument");
  for (int d = 0; d < CHORUS_DTYPE_COUNT; ++d)
    if (std::strcmp(name, kDtypeNames[d]) == 0) return *dtype_out = d, CHORUS_OK;
  std::string valid;
  for (const char* n : kDtypeNames) valid += (valid.empty() ? "" : ", ") + std::string(n);
  return invalid(std::string("unknown dtype '") + name + "' (valid: " + valid + ")");
}

CHORUS_API const char* chorus_op_name(int op) {
  return op >= 0 && op < CHORUS_OP_COUNT ? kOpNames[op] : nullptr;
}

CHORUS_API int chorus_op_from_name(const char* name, int* op_out) {
  if (!name || !op_out) return invalid("chorus_op_from_name: NULL argument");
  for (int o = 0; o < CHORUS_OP_COUNT; ++o)
    if (std::strcmp(name, kOpNames[o]) == 0) return *op_out = o, CHORUS_OK;
  return invalid(std::string("unknown op '") + name + "' (valid: sum, prod, max, min)");
}

CHORUS_API const char* chorus_collective_name(int collective) {
  return collective >= 0 && collective < CHORUS_COLL_COUNT ? kCollNames[collective] : nullptr;
}
