// The C host API: thin wrappers that turn Status into a return code plus the
// per-thread last-error text, and never let an exception out.
#include <chorus/chorus.h>

#include "core/communicator.h"
#include "core/config.h"
#include "core/log.h"

#include <cstring>
#include <new>
#include <string>

#define CHORUS_API extern "C" __attribute__((visibility("default")))

struct chorus_comm {
  std::unique_ptr<chorus::core::Communicator> impl;
};

namespace {

thread_local std::string t_last_error;

int set_error(const chorus::core::Status& st) {
  if (st.is_ok()) return CHORUS_OK;
  t_last_error = st.message();
  return st.code();
}

int invalid(const std::string& message) {
  t_last_error = message;
  return CHORUS_ERR_INVALID_ARGUMENT;
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
constexpr const char* kCollNames[CHORUS_COLL_COUNT] = {"all_reduce", "all_gather",
                                                       "reduce_scatter", "broadcast", "barrier"};

}  // namespace

CHORUS_API void chorus_options_init(chorus_options_t* opts) {
  if (!opts) return;
  std::memset(opts, 0, sizeof(*opts));
  opts->struct_size = sizeof(*opts);
  opts->rank = -1;
  opts->size = -1;
}

CHORUS_API int chorus_comm_init(const chorus_options_t* opts, chorus_comm_t** comm_out) {
  return guarded([&] {
    if (!comm_out) return invalid("chorus_comm_init: comm_out is NULL");
    chorus::core::ConfigInputs in;
    in.env = chorus::core::environment_map();
    if (opts) {
      if (opts->struct_size < offsetof(chorus_options_t, settings_count) + sizeof(size_t))
        return invalid("chorus_comm_init: options.struct_size is too small; call chorus_options_init first");
      if (opts->config_path) in.api_config_path = opts->config_path;
      for (size_t i = 0; i < opts->settings_count; ++i) {
        if (!opts->settings || !opts->settings[i])
          return invalid("chorus_comm_init: settings[" + std::to_string(i) + "] is NULL");
        in.api_settings.emplace_back(opts->settings[i]);
      }
      if (opts->rank >= 0) in.api_settings.push_back("bootstrap.rank=" + std::to_string(opts->rank));
      if (opts->size > 0)
        in.api_settings.push_back("bootstrap.world_size=" + std::to_string(opts->size));
      if (opts->coordinator) {
        std::string c = opts->coordinator;
        if (c.find('"') != std::string::npos || c.find('\\') != std::string::npos)
          return invalid("chorus_comm_init: coordinator contains a quote or backslash");
        in.api_settings.push_back("bootstrap.coordinator=\"" + c + "\"");
      }
    }
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
    auto* handle = new chorus_comm{std::move(*comm)};
    *comm_out = handle;
    return int(CHORUS_OK);
  });
}

CHORUS_API int chorus_comm_finalize(chorus_comm_t* comm) {
  return guarded([&] {
    delete comm;
    return int(CHORUS_OK);
  });
}

CHORUS_API int chorus_comm_abort(chorus_comm_t* comm) {
  if (!comm) return invalid("chorus_comm_abort: comm is NULL");
  comm->impl->abort();
  return CHORUS_OK;
}

CHORUS_API int chorus_comm_rank(const chorus_comm_t* comm, int* rank_out) {
  if (!comm || !rank_out) return invalid("chorus_comm_rank: NULL argument");
  *rank_out = comm->impl->rank();
  return CHORUS_OK;
}

CHORUS_API int chorus_comm_size(const chorus_comm_t* comm, int* size_out) {
  if (!comm || !size_out) return invalid("chorus_comm_size: NULL argument");
  *size_out = comm->impl->size();
  return CHORUS_OK;
}

CHORUS_API const char* chorus_comm_algorithm(const chorus_comm_t* comm, int collective,
                                             uint64_t bytes) {
  if (!comm) return nullptr;
  const auto* a = comm->impl->choose(collective, bytes);
  return a ? a->name : nullptr;
}

CHORUS_API const char* chorus_comm_transport(const chorus_comm_t* comm) {
  return comm ? comm->impl->transport_name().c_str() : nullptr;
}

#define CHORUS_COMM_CALL(name, expr)                              \
  return guarded([&] {                                            \
    if (!comm) return invalid(std::string(name) + ": comm is NULL"); \
    return set_error(expr);                                       \
  })

CHORUS_API int chorus_all_reduce(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                 int dtype, int op) {
  CHORUS_COMM_CALL("chorus_all_reduce", comm->impl->all_reduce(in, out, count, dtype, op));
}

CHORUS_API int chorus_all_gather(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                 int dtype) {
  CHORUS_COMM_CALL("chorus_all_gather", comm->impl->all_gather(in, out, count, dtype));
}

CHORUS_API int chorus_reduce_scatter(chorus_comm_t* comm, const void* in, void* out, size_t count,
                                     int dtype, int op) {
  CHORUS_COMM_CALL("chorus_reduce_scatter", comm->impl->reduce_scatter(in, out, count, dtype, op));
}

CHORUS_API int chorus_broadcast(chorus_comm_t* comm, void* buf, size_t count, int dtype, int root) {
  CHORUS_COMM_CALL("chorus_broadcast", comm->impl->broadcast(buf, count, dtype, root));
}

CHORUS_API int chorus_barrier(chorus_comm_t* comm) {
  CHORUS_COMM_CALL("chorus_barrier", comm->impl->barrier());
}

CHORUS_API int chorus_send(chorus_comm_t* comm, const void* buf, size_t count, int dtype, int peer) {
  CHORUS_COMM_CALL("chorus_send", comm->impl->send(buf, count, dtype, peer));
}

CHORUS_API int chorus_recv(chorus_comm_t* comm, void* buf, size_t count, int dtype, int peer) {
  CHORUS_COMM_CALL("chorus_recv", comm->impl->recv(buf, count, dtype, peer));
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
