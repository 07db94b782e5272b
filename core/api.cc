// The C host API: thin wrappers that turn Status into a return code plus the
// per-thread last-error text, and never let an exception out. This file:
// the shared handle and error plumbing, options and configuration, the
// communicator's lifetime, split, counters and names. The calls that move
// data are in api_calls.cc.
#include "core/api_internal.h"

#include "core/config.h"
#include "core/log.h"
#include "core/transport_probe.h"

#include <cstring>
#include <string>
#include <vector>

namespace chorus::core::api {

namespace {
thread_local std::string t_last_error;
}  // namespace

std::string& last_error() { return t_last_error; }

LiveHandles<chorus_comm>& live_comms() {
  static auto* l = new LiveHandles<chorus_comm>;  // never destroyed: finalize may run at exit
  return *l;
}
LiveHandles<chorus_request>& live_requests() {
  static auto* l = new LiveHandles<chorus_request>;
  return *l;
}

int set_error(const Status& st) {
  if (st.is_ok()) return CHORUS_OK;
  t_last_error = st.message();
  return st.code();
}

int invalid(const std::string& message) {
  t_last_error = message;
  return CHORUS_ERR_INVALID_ARGUMENT;
}

int check_comm(const chorus_comm* comm, const char* caller) {
  if (!comm) return invalid(std::string(caller) + ": comm is NULL");
  if (!live(comm)) return invalid(std::string(caller) + kNotLiveComm);
  return CHORUS_OK;
}

}  // namespace chorus::core::api

using namespace chorus::core::api;
using chorus::core::Communicator;
using chorus::core::Status;

namespace {

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
  const auto* p = comm->impl->choose_plugin(Communicator::query_call(collective, bytes));
  return p ? p->name().c_str() : nullptr;
}

CHORUS_API const char* chorus_comm_transport(const chorus_comm_t* comm) {
  return live(comm) ? comm->impl->transport_name().c_str() : nullptr;
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

CHORUS_API const char* chorus_last_error(void) { return last_error().c_str(); }

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
