// The exported ops table: the C boundary of the libfabric transport. Every
// op is wrapped so no exception crosses it; failures become a status plus
// the calling thread's last-error text.
#include "context.h"
#include "endpoint.h"
#include "error.h"
#include "log.h"
#include "memory.h"
#include "provider.h"

#include <chorus/transport.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <string>

namespace {

using chorus::ofi::set_last_error;

template <class F>
int guarded(const char* op, F&& f) noexcept {
  try {
    return f();
  } catch (const chorus::ofi::Error& e) {
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

int ofi_init(const chorus_host_v1_t* host) {
  chorus::ofi::set_log_host(host);
  return CHORUS_OK;
}

void ofi_fini(void) { chorus::ofi::set_log_host(nullptr); }

const char* ofi_last_error(void) { return chorus::ofi::last_error_text(); }

int ofi_context_open(const chorus_tp_context_info_t* info, chorus_tp_context_t** ctx_out) {
  if (info == nullptr || ctx_out == nullptr) return null_argument("context_open");
  return guarded("context_open", [&] {
    *ctx_out = new chorus_tp_context(*info);
    return CHORUS_OK;
  });
}

int ofi_context_close(chorus_tp_context_t* ctx) {
  if (ctx == nullptr) return null_argument("context_close");
  return guarded("context_close", [&] {
    delete ctx;
    return CHORUS_OK;
  });
}

int ofi_get_caps(chorus_tp_context_t* ctx, chorus_tp_caps_t* caps_out) {
  if (ctx == nullptr || caps_out == nullptr) return null_argument("get_caps");
  // The caller's struct_size says how much it allocated (0: minor 0's size);
  // fill that much and say how much we wrote.
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

int ofi_endpoint_open(chorus_tp_context_t* ctx, int peer_rank, int channel, void* address_out,
                      size_t* address_len, chorus_tp_endpoint_t** ep_out) {
  if (ctx == nullptr || ep_out == nullptr) return null_argument("endpoint_open");
  return guarded("endpoint_open", [&] {
    *ep_out = ctx->open_endpoint(peer_rank, channel, address_out, address_len)->handle();
    return CHORUS_OK;
  });
}

int ofi_endpoint_connect(chorus_tp_endpoint_t* ep, const void* peer_address, size_t length,
                         int timeout_ms) {
  if (ep == nullptr || peer_address == nullptr) return null_argument("endpoint_connect");
  return guarded("endpoint_connect", [&] {
    ep->connect(peer_address, length, timeout_ms);
    return CHORUS_OK;
  });
}

int ofi_endpoint_close(chorus_tp_endpoint_t* ep) {
  if (ep == nullptr) return null_argument("endpoint_close");
  return guarded("endpoint_close", [&] {
    ep->context().close_endpoint(ep);
    return CHORUS_OK;
  });
}

int ofi_mem_register(chorus_tp_context_t* ctx, void* addr, size_t length, int mem_kind,
                     chorus_tp_mr_t** mr_out) {
  if (ctx == nullptr || mr_out == nullptr) return null_argument("mem_register");
  return guarded("mem_register", [&] {
    *mr_out = static_cast<chorus_tp_mr_t*>(ctx->register_memory(addr, length, mem_kind));
    return CHORUS_OK;
  });
}

int ofi_mem_deregister(chorus_tp_context_t* ctx, chorus_tp_mr_t* mr) {
  if (ctx == nullptr) return null_argument("mem_deregister");
  return guarded("mem_deregister", [&] {
    ctx->deregister_memory(mr);
    return CHORUS_OK;
  });
}

int ofi_post_send(chorus_tp_endpoint_t* ep, const void* buf, size_t length, chorus_tp_mr_t* mr,
                  uint64_t wr_id) {
  if (ep == nullptr) return null_argument("post_send");
  return guarded("post_send", [&] { return ep->post_send(buf, length, mr, wr_id); });
}

int ofi_post_recv(chorus_tp_endpoint_t* ep, void* buf, size_t length, chorus_tp_mr_t* mr,
                  uint64_t wr_id) {
  if (ep == nullptr) return null_argument("post_recv");
  return guarded("post_recv", [&] { return ep->post_recv(buf, length, mr, wr_id); });
}

int ofi_poll(chorus_tp_context_t* ctx, chorus_tp_completion_t* out, size_t max) {
  if (ctx == nullptr) return null_argument("poll");
  return guarded("poll", [&] { return ctx->poll(out, max); });
}

int ofi_read_error(chorus_tp_context_t* ctx, chorus_tp_error_t* err_out) {
  if (ctx == nullptr) return null_argument("read_error");
  return guarded("read_error", [&] { return ctx->read_error(err_out); });
}

int ofi_wait(chorus_tp_context_t* ctx, int timeout_ms) {
  if (ctx == nullptr) return null_argument("wait");
  return guarded("wait", [&] { return ctx->wait(timeout_ms); });
}

int ofi_interrupt(chorus_tp_context_t* ctx) {
  if (ctx == nullptr) return null_argument("interrupt");
  return guarded("interrupt", [&] { return ctx->interrupt(); });
}

int ofi_describe(char* buf, size_t len) {
  if (buf == nullptr || len == 0) return null_argument("describe");
  std::string text;
  const int rc = guarded("describe", [&] {
    return chorus::ofi::describe_providers(text) ? CHORUS_OK : CHORUS_ERR_UNAVAILABLE;
  });
  if (text.empty()) text = chorus::ofi::last_error_text();
  const std::size_t n = std::min(text.size(), len - 1);
  std::memcpy(buf, text.data(), n);
  buf[n] = '\0';
  return rc;
}

}  // namespace

extern "C" {

__attribute__((
    visibility("default"))) extern const chorus_transport_plugin_v1_t chorus_transport_plugin_v1;

const chorus_transport_plugin_v1_t chorus_transport_plugin_v1 = {
    sizeof(chorus_transport_plugin_v1_t),
    CHORUS_TRANSPORT_ABI_MINOR,
    "ofi",
    ofi_init,
    ofi_fini,
    ofi_last_error,
    ofi_context_open,
    ofi_context_close,
    ofi_get_caps,
    ofi_endpoint_open,
    ofi_endpoint_connect,
    ofi_endpoint_close,
    ofi_mem_register,
    ofi_mem_deregister,
    ofi_post_send,
    ofi_post_recv,
    ofi_poll,
    ofi_read_error,
    ofi_wait,
    ofi_interrupt,
    ofi_describe,
};

}  // extern "C"
