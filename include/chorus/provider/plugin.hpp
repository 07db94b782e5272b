// chorus::provider::TransportPlugin: builds a transport's exported ops table
// (chorus_transport_plugin_v1_t) from its context and endpoint classes, with
// every entry point checked for NULL arguments and guarded so no exception
// crosses the C boundary. Part of the provider toolkit; see
// docs/transport-abi.md for a walk-through.
#pragma once

#include <chorus/transport.h>
#include <chorus/provider/error.hpp>
#include <chorus/provider/log.hpp>

#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace chorus::provider {

/// Copies `caps` into the caller's struct as get_caps must: the caller's
/// struct_size says how much it allocated (0: minor 0's size); at most that
/// much is written, and struct_size is set to what was written.
int copy_caps(const chorus_tp_caps_t& caps, chorus_tp_caps_t* caps_out);

/// Writes `text` into `buf`, cut to `len - 1` bytes and always terminated.
/// `len` must be at least 1.
void copy_text(std::string_view text, char* buf, std::size_t len);

/// `Impl` describes one transport:
///  - `static constexpr const char* kName`: the short name ("tcp").
///  - `static chorus_tp_context_t* open_context(const chorus_tp_context_info_t&)`.
///  - `static int describe(std::string& text)`: fills `text`, returns a status.
///  - optional `static auto* context(chorus_tp_context_t*)` and
///    `static auto* endpoint(chorus_tp_endpoint_t*)`: from handle to object;
///    without them the handle's own type is used (a transport that defines
///    `struct chorus_tp_context` as its context class).
///  - optional `static chorus_tp_mr_t* register_memory(ctx*, addr, length,
///    kind)` and `static void deregister_memory(ctx*, chorus_tp_mr_t*)`;
///    without them registration is a no-op for host memory and other kinds
///    are NOT_SUPPORTED.
///  - optional `static void connect(ep*, address, length, timeout_ms)` (or
///    `static int connect(...)`, returning a status as below);
///    without it `ep->connect(address, length, timeout_ms)`, which may
///    return an int status (CHORUS_ERR_AGAIN from a polled connect).
/// The context object has caps(), open_endpoint(peer, channel, address_out,
/// address_len) returning an endpoint with handle(), poll, read_error, wait
/// and interrupt (statuses as in the ABI); an endpoint has context() with
/// close_endpoint(ep), and post_send/post_recv with or without the mr.
/// A context that has a wait object (transport.h, minor 4) also has
/// `int wait_fd(int* fd_out)`; without it the table's wait_fd is NULL.
template <class Impl>
class TransportPlugin {
 public:
  /// The table to export as chorus_transport_plugin_v1.
  static constexpr chorus_transport_plugin_v1_t table() {
    return chorus_transport_plugin_v1_t{
        sizeof(chorus_transport_plugin_v1_t),
        CHORUS_TRANSPORT_ABI_MINOR,
        Impl::kName,
        &init,
        &fini,
        &last_error,
        &context_open,
        &context_close,
        &get_caps,
        &endpoint_open,
        &endpoint_connect,
        &endpoint_close,
        &mem_register,
        &mem_deregister,
        &post_send,
        &post_recv,
        &poll,
        &read_error,
        &wait,
        &interrupt,
        &describe,
        wait_fd_op(),
        post_send_imm_op(),
    };
  }

 private:
  static auto* context(chorus_tp_context_t* ctx) {
    if constexpr (requires { Impl::context(ctx); }) {
      return Impl::context(ctx);
    } else {
      return ctx;
    }
  }
  static auto* endpoint(chorus_tp_endpoint_t* ep) {
    if constexpr (requires { Impl::endpoint(ep); }) {
      return Impl::endpoint(ep);
    } else {
      return ep;
    }
  }

  static int init(const chorus_host_v1_t* host) {
    set_log_host(host, Impl::kName);
    return CHORUS_OK;
  }
  static void fini() { set_log_host(nullptr, Impl::kName); }
  static const char* last_error() { return last_error_text(); }

  static int context_open(const chorus_tp_context_info_t* info, chorus_tp_context_t** ctx_out) {
    if (info == nullptr || ctx_out == nullptr) return null_argument("context_open");
    return guarded("context_open", [&] {
      *ctx_out = Impl::open_context(*info);
      return CHORUS_OK;
    });
  }
  static int context_close(chorus_tp_context_t* ctx) {
    if (ctx == nullptr) return null_argument("context_close");
    return guarded("context_close", [&] {
      delete context(ctx);
      return CHORUS_OK;
    });
  }
  static int get_caps(chorus_tp_context_t* ctx, chorus_tp_caps_t* caps_out) {
    if (ctx == nullptr || caps_out == nullptr) return null_argument("get_caps");
    return guarded("get_caps", [&] { return copy_caps(context(ctx)->caps(), caps_out); });
  }

  static int endpoint_open(chorus_tp_context_t* ctx, int peer_rank, int channel, void* address_out,
                           size_t* address_len, chorus_tp_endpoint_t** ep_out) {
    if (ctx == nullptr || ep_out == nullptr) return null_argument("endpoint_open");
    return guarded("endpoint_open", [&] {
      *ep_out = context(ctx)->open_endpoint(peer_rank, channel, address_out, address_len)->handle();
      return CHORUS_OK;
    });
  }
  static int endpoint_connect(chorus_tp_endpoint_t* ep, const void* peer_address, size_t length,
                              int timeout_ms) {
    if (ep == nullptr || peer_address == nullptr) return null_argument("endpoint_connect");
    return guarded("endpoint_connect", [&]() -> int {
      if constexpr (requires {
                      {
                        Impl::connect(endpoint(ep), peer_address, length, timeout_ms)
                        } -> std::same_as<int>;
                    }) {
        // A status of its own, as below.
        return Impl::connect(endpoint(ep), peer_address, length, timeout_ms);
      } else if constexpr (requires {
                             Impl::connect(endpoint(ep), peer_address, length, timeout_ms);
                           }) {
        Impl::connect(endpoint(ep), peer_address, length, timeout_ms);
      } else if constexpr (std::is_same_v<decltype(endpoint(ep)->connect(peer_address, length,
                                                                         timeout_ms)),
                                          int>) {
        // A status of its own: a polled connect's AGAIN (CHORUS_TP_CAP_CONNECT_POLL).
        return endpoint(ep)->connect(peer_address, length, timeout_ms);
      } else {
        endpoint(ep)->connect(peer_address, length, timeout_ms);
      }
      return CHORUS_OK;
    });
  }
  static int endpoint_close(chorus_tp_endpoint_t* ep) {
    if (ep == nullptr) return null_argument("endpoint_close");
    return guarded("endpoint_close", [&] {
      auto* e = endpoint(ep);
      e->context().close_endpoint(e);
      return CHORUS_OK;
    });
  }

  static int mem_register(chorus_tp_context_t* ctx, void* addr, size_t length, int mem_kind,
                          chorus_tp_mr_t** mr_out) {
    if (ctx == nullptr || mr_out == nullptr) return null_argument("mem_register");
    if (addr == nullptr && length > 0) return null_argument("mem_register");
    if constexpr (requires { Impl::register_memory(context(ctx), addr, length, mem_kind); }) {
      return guarded("mem_register", [&] {
        *mr_out = Impl::register_memory(context(ctx), addr, length, mem_kind);
        return CHORUS_OK;
      });
    } else {
      if (mem_kind != CHORUS_MEM_HOST) {
        return set_last_error(CHORUS_ERR_NOT_SUPPORTED, std::string("mem_register: the ") +
                                                            Impl::kName +
                                                            " transport handles host memory only "
                                                            "(kind " +
                                                            std::to_string(mem_kind) + ")");
      }
      *mr_out = nullptr;  // nothing to register (caps.flags has no NEEDS_REGISTRATION)
      return CHORUS_OK;
    }
  }
  static int mem_deregister(chorus_tp_context_t* ctx, chorus_tp_mr_t* mr) {
    if (ctx == nullptr) return null_argument("mem_deregister");
    if constexpr (requires { Impl::deregister_memory(context(ctx), mr); }) {
      return guarded("mem_deregister", [&] {
        Impl::deregister_memory(context(ctx), mr);
        return CHORUS_OK;
      });
    } else {
      return CHORUS_OK;
    }
  }

  static int post_send(chorus_tp_endpoint_t* ep, const void* buf, size_t length, chorus_tp_mr_t* mr,
                       uint64_t wr_id) {
    if (ep == nullptr) return null_argument("post_send");
    return guarded("post_send", [&] {
      auto* e = endpoint(ep);
      if constexpr (requires { e->post_send(buf, length, mr, wr_id); }) {
        return e->post_send(buf, length, mr, wr_id);
      } else {
        return e->post_send(buf, length, wr_id);
      }
    });
  }
  static int post_recv(chorus_tp_endpoint_t* ep, void* buf, size_t length, chorus_tp_mr_t* mr,
                       uint64_t wr_id) {
    if (ep == nullptr) return null_argument("post_recv");
    return guarded("post_recv", [&] {
      auto* e = endpoint(ep);
      if constexpr (requires { e->post_recv(buf, length, mr, wr_id); }) {
        return e->post_recv(buf, length, mr, wr_id);
      } else {
        return e->post_recv(buf, length, wr_id);
      }
    });
  }

  static int poll(chorus_tp_context_t* ctx, chorus_tp_completion_t* out, size_t max) {
    if (ctx == nullptr) return null_argument("poll");
    return guarded("poll", [&] { return context(ctx)->poll(out, max); });
  }
  static int read_error(chorus_tp_context_t* ctx, chorus_tp_error_t* err_out) {
    if (ctx == nullptr) return null_argument("read_error");
    return guarded("read_error", [&] { return context(ctx)->read_error(err_out); });
  }
  static int wait(chorus_tp_context_t* ctx, int timeout_ms) {
    if (ctx == nullptr) return null_argument("wait");
    return guarded("wait", [&] { return context(ctx)->wait(timeout_ms); });
  }
  static int interrupt(chorus_tp_context_t* ctx) {
    if (ctx == nullptr) return null_argument("interrupt");
    return guarded("interrupt", [&] { return context(ctx)->interrupt(); });
  }

  using Context = std::remove_pointer_t<decltype(context(std::declval<chorus_tp_context_t*>()))>;
  static constexpr auto wait_fd_op() {
    using Op = int (*)(chorus_tp_context_t*, int*);
    if constexpr (requires(Context & c, int* fd) { c.wait_fd(fd); }) {
      return Op{&wait_fd};
    } else {
      return Op{nullptr};
    }
  }
  static int wait_fd(chorus_tp_context_t* ctx, int* fd_out) {
    if (ctx == nullptr || fd_out == nullptr) return null_argument("wait_fd");
    if constexpr (requires(Context & c, int* fd) { c.wait_fd(fd); }) {
      return guarded("wait_fd", [&] { return context(ctx)->wait_fd(fd_out); });
    } else {
      return set_last_error(CHORUS_ERR_NOT_SUPPORTED, "wait_fd: no wait object");
    }
  }

  using Endpoint = std::remove_pointer_t<decltype(endpoint(std::declval<chorus_tp_endpoint_t*>()))>;
  /// post_send_imm (minor 5) exists when the endpoint has
  /// `post_send_imm(buf, length, mr, wr_id, imm)`; its context then declares
  /// CHORUS_TP_CAP_IMM_DATA.
  static constexpr auto post_send_imm_op() {
    using Op =
        int (*)(chorus_tp_endpoint_t*, const void*, size_t, chorus_tp_mr_t*, uint64_t, uint32_t);
    if constexpr (requires(Endpoint & e, chorus_tp_mr_t * mr) {
                    e.post_send_imm(nullptr, size_t{0}, mr, uint64_t{0}, uint32_t{0});
                  }) {
      return Op{&post_send_imm};
    } else {
      return Op{nullptr};
    }
  }
  static int post_send_imm(chorus_tp_endpoint_t* ep, const void* buf, size_t length,
                           chorus_tp_mr_t* mr, uint64_t wr_id, uint32_t imm) {
    if (ep == nullptr) return null_argument("post_send_imm");
    return guarded("post_send_imm",
                   [&] { return endpoint(ep)->post_send_imm(buf, length, mr, wr_id, imm); });
  }

  /// The describe text is written even on failure (it then says what is
  /// missing); the status says whether the transport can run here.
  static int describe(char* buf, size_t len) {
    if (buf == nullptr || len == 0) return null_argument("describe");
    std::string text;
    const int rc = guarded("describe", [&] { return Impl::describe(text); });
    if (rc != CHORUS_OK && text.empty()) {
      copy_text(last_error_text(), buf, len);
    } else {
      copy_text(text, buf, len);
    }
    return rc;
  }
};

}  // namespace chorus::provider

/// Defines the plugin's one exported symbol, `chorus_transport_plugin_v1`, as
/// `TransportPlugin<Impl>::table()`, with default visibility and C linkage
/// (the plugin's version script hides everything else). Use it once per
/// plugin, at global scope, after `Impl` is complete:
///
///     CHORUS_PROVIDER_EXPORT_TRANSPORT(MynetPlugin);
#define CHORUS_PROVIDER_EXPORT_TRANSPORT(Impl)                    \
  extern "C" __attribute__((visibility("default")))               \
  const chorus_transport_plugin_v1_t chorus_transport_plugin_v1 = \
      ::chorus::provider::TransportPlugin<Impl>::table()
