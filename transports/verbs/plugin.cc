// The exported ops table: the C boundary of the verbs transport. Every op is
// wrapped so no exception crosses it; failures become a status plus the
// calling thread's last-error text.
#include "context.h"
#include "device.h"
#include "endpoint.h"
#include "error.h"
#include "log.h"
#include "memory_region.h"

#include <chorus/transport.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

namespace {

using chorus::verbs::set_last_error;

template <class F>
int guarded(const char* op, F&& f) noexcept {
  try {
    return f();
  } catch (const chorus::verbs::Error& e) {
    return set_last_error(e.status(), std::string(op) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return set_last_error(CHORUS_ERR_SYSTEM, std::string(op) + ": out of memory");
  } catch (const std::exception& e) {
    return set_last_error(CHORUS_ERR_INTERNAL, std::string(op) + ": " + e.what());
  } catch (...) {
    return set_last_error(CHORUS_ERR_INTERNAL, std::string(op) + ": unknown exception");
  }
}

int null_argument(const char* op) {
  return set_last_error(CHORUS_ERR_INVALID_ARGUMENT, std::string(op) + ": NULL argument");
}

int verbs_init(const chorus_host_v1_t* host) {
  chorus::verbs::set_log_host(host);
  return CHORUS_OK;
}

void verbs_fini(void) { chorus::verbs::set_log_host(nullptr); }

const char* verbs_last_error(void) { return chorus::verbs::last_error_text(); }

int verbs_context_open(const chorus_tp_context_info_t* info, chorus_tp_context_t** ctx_out) {
  if (info == nullptr || ctx_out == nullptr) return null_argument("context_open");
  return guarded("context_open", [&] {
    *ctx_out = new chorus_tp_context(*info);
    return CHORUS_OK;
  });
}

int verbs_context_close(chorus_tp_context_t* ctx) {
  if (ctx == nullptr) return null_argument("context_close");
  return guarded("context_close", [&] {
    delete ctx;
    return CHORUS_OK;
  });
}

int verbs_get_caps(chorus_tp_context_t* ctx, chorus_tp_caps_t* caps_out) {
  if (ctx == nullptr || caps_out == nullptr) return null_argument("get_caps");
  const chorus_tp_caps_t caps = ctx->caps();
  std::size_t size = caps_out->struct_size == 0 ? sizeof caps : caps_out->struct_size;
  size = std::min(size, sizeof caps);
  if (size < sizeof caps.struct_size) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "get_caps: struct_size too small");
  }
  std::memcpy(caps_out, &caps, size);
  caps_out->struct_size = size;
  return CHORUS_OK;
}

int verbs_endpoint_open(chorus_tp_context_t* ctx, int peer_rank, int channel, void* address_out,
                        size_t* address_len, chorus_tp_endpoint_t** ep_out) {
  if (ctx == nullptr || ep_out == nullptr) return null_argument("endpoint_open");
  return guarded("endpoint_open", [&] {
    *ep_out = ctx->open_endpoint(peer_rank, channel, address_out, address_len)->handle();
    return CHORUS_OK;
  });
}

int verbs_endpoint_connect(chorus_tp_endpoint_t* ep, const void* peer_address, size_t length,
                           int timeout_ms) {
  if (ep == nullptr || peer_address == nullptr) return null_argument("endpoint_connect");
  return guarded("endpoint_connect", [&] {
    ep->context().connect(*ep, peer_address, length, timeout_ms);
    return CHORUS_OK;
  });
}

int verbs_endpoint_close(chorus_tp_endpoint_t* ep) {
  if (ep == nullptr) return null_argument("endpoint_close");
  return guarded("endpoint_close", [&] {
    ep->context().close_endpoint(ep);
    return CHORUS_OK;
  });
}

int verbs_mem_register(chorus_tp_context_t* ctx, void* addr, size_t length, int mem_kind,
                       chorus_tp_mr_t** mr_out) {
  if (ctx == nullptr || mr_out == nullptr) return null_argument("mem_register");
  if (addr == nullptr && length > 0) return null_argument("mem_register");
  if (mem_kind != CHORUS_MEM_HOST) {
    return set_last_error(CHORUS_ERR_NOT_SUPPORTED,
                          "mem_register: the verbs transport registers host memory only (kind " +
                              std::to_string(mem_kind) +
                              "; CUDA memory needs peer-memory support, not built)");
  }
  return guarded("mem_register", [&] {
    *mr_out = ctx->register_memory(addr, length);
    return CHORUS_OK;
  });
}

int verbs_mem_deregister(chorus_tp_context_t* ctx, chorus_tp_mr_t* mr) {
  if (ctx == nullptr) return null_argument("mem_deregister");
  return guarded("mem_deregister", [&] {
    ctx->deregister_memory(mr);
    return CHORUS_OK;
  });
}

int verbs_post_send(chorus_tp_endpoint_t* ep, const void* buf, size_t length, chorus_tp_mr_t* mr,
                    uint64_t wr_id) {
  if (ep == nullptr) return null_argument("post_send");
  return guarded("post_send", [&] { return ep->post_send(buf, length, mr, wr_id); });
}

int verbs_post_recv(chorus_tp_endpoint_t* ep, void* buf, size_t length, chorus_tp_mr_t* mr,
                    uint64_t wr_id) {
  if (ep == nullptr) return null_argument("post_recv");
  return guarded("post_recv", [&] { return ep->post_recv(buf, length, mr, wr_id); });
}

int verbs_poll(chorus_tp_context_t* ctx, chorus_tp_completion_t* out, size_t max) {
  if (ctx == nullptr) return null_argument("poll");
  return guarded("poll", [&] { return ctx->poll(out, max); });
}

int verbs_read_error(chorus_tp_context_t* ctx, chorus_tp_error_t* err_out) {
  if (ctx == nullptr) return null_argument("read_error");
  return guarded("read_error", [&] { return ctx->read_error(err_out); });
}

int verbs_wait(chorus_tp_context_t* ctx, int timeout_ms) {
  if (ctx == nullptr) return null_argument("wait");
  return guarded("wait", [&] { return ctx->wait(timeout_ms); });
}

int verbs_interrupt(chorus_tp_context_t* ctx) {
  if (ctx == nullptr) return null_argument("interrupt");
  return guarded("interrupt", [&] { return ctx->interrupt(); });
}

int verbs_describe(char* buf, size_t len) {
  if (buf == nullptr || len == 0) return null_argument("describe");
  try {
    bool usable = false;
    const std::string text = chorus::verbs::describe_devices(usable);
    const std::size_t n = std::min(text.size(), len - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
    if (!usable) return set_last_error(CHORUS_ERR_UNAVAILABLE, text);
    return CHORUS_OK;
  } catch (...) {
    buf[0] = '\0';
    return set_last_error(CHORUS_ERR_SYSTEM, "describe: out of memory");
  }
}

}  // namespace

extern "C" {

__attribute__((
    visibility("default"))) extern const chorus_transport_plugin_v1_t chorus_transport_plugin_v1;

const chorus_transport_plugin_v1_t chorus_transport_plugin_v1 = {
    sizeof(chorus_transport_plugin_v1_t),
    CHORUS_TRANSPORT_ABI_MINOR,
    "verbs",
    verbs_init,
    verbs_fini,
    verbs_last_error,
    verbs_context_open,
    verbs_context_close,
    verbs_get_caps,
    verbs_endpoint_open,
    verbs_endpoint_connect,
    verbs_endpoint_close,
    verbs_mem_register,
    verbs_mem_deregister,
    verbs_post_send,
    verbs_post_recv,
    verbs_poll,
    verbs_read_error,
    verbs_wait,
    verbs_interrupt,
    verbs_describe,
};

}  // extern "C"
