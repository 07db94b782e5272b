// The exported ops table: the C boundary of the shared-memory transport.
// Setup ops are wrapped so no exception crosses it; the data path returns
// statuses directly.
#include "context.h"
#include "endpoint.h"
#include "error.h"
#include "futex.h"
#include "log.h"

#include <chorus/transport.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

namespace {

using chorus::shm::Context;
using chorus::shm::Endpoint;
using chorus::shm::set_last_error;

template <class F>
int guarded(const char* op, F&& f) noexcept {
  try {
    return f();
  } catch (const chorus::shm::Error& e) {
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

int shm_init(const chorus_host_v1_t* host) {
  chorus::shm::set_log_host(host);
  return CHORUS_OK;
}

void shm_fini(void) { chorus::shm::set_log_host(nullptr); }

const char* shm_last_error(void) { return chorus::shm::last_error_text(); }

int shm_context_open(const chorus_tp_context_info_t* info, chorus_tp_context_t** ctx_out) {
  if (info == nullptr || ctx_out == nullptr) return null_argument("context_open");
  if (info->struct_size < offsetof(chorus_tp_context_info_t, config_count) + sizeof(size_t)) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "context_open: info struct_size too small");
  }
  return guarded("context_open", [&] {
    *ctx_out = (new Context(*info))->handle();
    return CHORUS_OK;
  });
}

int shm_context_close(chorus_tp_context_t* ctx) {
  if (ctx == nullptr) return null_argument("context_close");
  return guarded("context_close", [&] {
    delete Context::from(ctx);
    return CHORUS_OK;
  });
}

int shm_get_caps(chorus_tp_context_t* ctx, chorus_tp_caps_t* caps_out) {
  if (ctx == nullptr || caps_out == nullptr) return null_argument("get_caps");
  const chorus_tp_caps_t caps = Context::from(ctx)->caps();
  std::size_t size = caps_out->struct_size == 0 ? sizeof caps : caps_out->struct_size;
  size = std::min(size, sizeof caps);
  if (size < sizeof caps.struct_size) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "get_caps: struct_size too small");
  }
  std::memcpy(caps_out, &caps, size);
  caps_out->struct_size = size;
  return CHORUS_OK;
}

int shm_endpoint_open(chorus_tp_context_t* ctx, int peer_rank, int channel, void* address_out,
                      size_t* address_len, chorus_tp_endpoint_t** ep_out) {
  if (ctx == nullptr || ep_out == nullptr) return null_argument("endpoint_open");
  return guarded("endpoint_open", [&] {
    *ep_out =
        Context::from(ctx)->open_endpoint(peer_rank, channel, address_out, address_len)->handle();
    return CHORUS_OK;
  });
}

int shm_endpoint_connect(chorus_tp_endpoint_t* ep, const void* peer_address, size_t length,
                         int timeout_ms) {
  (void)timeout_ms;  // never waits: the peer's segment exists from its endpoint_open on
  if (ep == nullptr || peer_address == nullptr) return null_argument("endpoint_connect");
  return guarded("endpoint_connect", [&] {
    Endpoint::from(ep)->connect(peer_address, length);
    return CHORUS_OK;
  });
}

int shm_endpoint_close(chorus_tp_endpoint_t* ep) {
  if (ep == nullptr) return null_argument("endpoint_close");
  return guarded("endpoint_close", [&] {
    Endpoint* e = Endpoint::from(ep);
    e->context().close_endpoint(e);
    return CHORUS_OK;
  });
}

int shm_mem_register(chorus_tp_context_t* ctx, void* addr, size_t length, int mem_kind,
                     chorus_tp_mr_t** mr_out) {
  if (ctx == nullptr || mr_out == nullptr) return null_argument("mem_register");
  if (addr == nullptr && length > 0) return null_argument("mem_register");
  if (mem_kind != CHORUS_MEM_HOST) {
    return set_last_error(CHORUS_ERR_NOT_SUPPORTED,
                          "mem_register: the shm transport handles host memory only (kind " +
                              std::to_string(mem_kind) + ")");
  }
  *mr_out = nullptr;  // no registration needed (caps.flags has no NEEDS_REGISTRATION)
  return CHORUS_OK;
}

int shm_mem_deregister(chorus_tp_context_t* ctx, chorus_tp_mr_t* mr) {
  (void)mr;
  if (ctx == nullptr) return null_argument("mem_deregister");
  return CHORUS_OK;
}

int shm_post_send(chorus_tp_endpoint_t* ep, const void* buf, size_t length, chorus_tp_mr_t* mr,
                  uint64_t wr_id) {
  (void)mr;
  if (ep == nullptr) return null_argument("post_send");
  return Endpoint::from(ep)->post_send(buf, length, wr_id);
}

int shm_post_recv(chorus_tp_endpoint_t* ep, void* buf, size_t length, chorus_tp_mr_t* mr,
                  uint64_t wr_id) {
  (void)mr;
  if (ep == nullptr) return null_argument("post_recv");
  return Endpoint::from(ep)->post_recv(buf, length, wr_id);
}

int shm_poll(chorus_tp_context_t* ctx, chorus_tp_completion_t* out, size_t max) {
  if (ctx == nullptr || (out == nullptr && max > 0)) return null_argument("poll");
  return Context::from(ctx)->poll(out, max);
}

int shm_read_error(chorus_tp_context_t* ctx, chorus_tp_error_t* err_out) {
  if (ctx == nullptr) return null_argument("read_error");
  return Context::from(ctx)->read_error(err_out);
}

int shm_wait(chorus_tp_context_t* ctx, int timeout_ms) {
  if (ctx == nullptr) return null_argument("wait");
  return Context::from(ctx)->wait(timeout_ms);
}

int shm_interrupt(chorus_tp_context_t* ctx) {
  if (ctx == nullptr) return null_argument("interrupt");
  return Context::from(ctx)->interrupt();
}

std::string describe_host() {
  // Segments are memfds (segment.h): /dev/shm holds none of them.
  std::string out = "shared memory (memfd segments, opened through /proc/<pid>/fd)";
  out += "; large messages: process_vm_readv";
  std::ifstream yama("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  if (yama >> scope && scope > 0 && ::geteuid() != 0) {
    out += " likely refused (kernel.yama.ptrace_scope = " + std::to_string(scope) +
           "), so copied through the ring";
  } else {
    out += " (checked per peer at connect)";
  }
  out += chorus::shm::futex_waitv_available() ? "; futex_waitv" : "; no futex_waitv (1 ms naps)";
  return out;
}

int shm_describe(char* buf, size_t len) {
  if (buf == nullptr || len == 0) return null_argument("describe");
  int rc = CHORUS_OK;
  std::string text;
  try {
    text = describe_host();
  } catch (const chorus::shm::Error& e) {
    rc = e.status();
    text = e.what();
  } catch (...) {
    rc = CHORUS_ERR_SYSTEM;
    text = "out of memory";
  }
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
    "shm",
    shm_init,
    shm_fini,
    shm_last_error,
    shm_context_open,
    shm_context_close,
    shm_get_caps,
    shm_endpoint_open,
    shm_endpoint_connect,
    shm_endpoint_close,
    shm_mem_register,
    shm_mem_deregister,
    shm_post_send,
    shm_post_recv,
    shm_poll,
    shm_read_error,
    shm_wait,
    shm_interrupt,
    shm_describe,
};

}  // extern "C"
