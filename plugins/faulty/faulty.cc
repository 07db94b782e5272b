// The faulty transport: a third-party transport plugin that wraps another
// transport plugin and injects faults into it. It uses only the installed
// plugin SDK (<chorus/transport.h> and the provider toolkit's error, log and
// caps helpers); the inner transport is dlopened by name at context_open
// (inner_transport.h) and every op is forwarded to it.
//
// Faults (all off by default; fault_config.h):
//  - drop_after: posting send number drop_after + 1 on an endpoint closes its
//    inner connection. That send and everything still outstanding on the
//    endpoint fail with PEER_LOST, later posts return PEER_LOST, and the peer
//    sees a lost connection.
//  - delay_us: every send is held for that long, then posted to the inner
//    transport. Held sends are posted from poll and wait (wait sleeps no
//    longer than the next one is due), so no thread is needed.
//  - error_after: completion number error_after + 1 of a context is reported
//    as a failure (CHORUS_ERR_SYSTEM, "faulty: injected error ...") in place of
//    the real one.
//
// Completions: inner completions (successes and failures) are moved, in
// order, into a queue of the wrapping context, where faults are applied and
// from which poll and read_error serve the caller. The wrapper keeps, per
// endpoint and direction, the work requests the inner transport still owns,
// so a dropped connection fails exactly those, in post order. It enforces the
// inner transport's per-endpoint limits itself, counting a post as
// outstanding until the caller has reaped its completion from this queue.
//
// Immediates (transport ABI minor 5): post_send_imm is forwarded when the
// inner transport has it, and the context declares CHORUS_TP_CAP_IMM_DATA
// only then; held and dropped sends keep their immediate.
//
// Threading: as the ABI says, one thread at a time per context; interrupt
// may come from any thread and only forwards to the inner transport.
//
// This file holds the ABI entry points and the exported ops table; the
// context and endpoint objects they work on (completion queue, held sends,
// dropping a connection) are in fault_context.{h,cc}.
#include <chorus/transport.h>
#include <chorus/provider/error.hpp>
#include <chorus/provider/log.hpp>
#include <chorus/provider/plugin.hpp>
#include <chorus/transport_names.hpp>

#include "fault_config.h"
#include "fault_context.h"
#include "inner_transport.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace chorus::faulty {
namespace {

// Last-error text, logging through the host, the exception guard and the
// NULL-argument check come from the provider toolkit.
using provider::guarded;
using provider::log;
using provider::null_argument;
using provider::set_last_error;

const chorus_host_v1_t* g_host = nullptr;  // handed to the inner transport

int faulty_init(const chorus_host_v1_t* host) {
  g_host = host;
  provider::set_log_host(host, "faulty");
  return CHORUS_OK;
}

void faulty_fini(void) {
  unload_inner_transports();
  g_host = nullptr;
  provider::set_log_host(nullptr, "faulty");
}

const char* faulty_last_error(void) { return provider::last_error_text(); }

int faulty_context_open(const chorus_tp_context_info_t* info, chorus_tp_context_t** ctx_out) {
  if (!info || !ctx_out) return null_argument("context_open");
  return guarded("context_open", [&]() -> int {
    constexpr size_t need = offsetof(chorus_tp_context_info_t, config_count) + sizeof(size_t);
    if (info->struct_size < need)
      return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "faulty: context_open: info->struct_size " +
                                std::to_string(info->struct_size) + " is smaller than " +
                                std::to_string(need));
    auto ctx = std::make_unique<chorus_tp_context>();
    std::string error;
    if (int rc = parse_config(info->config, info->config_count, ctx->cfg, error); rc != CHORUS_OK)
      return set_last_error(rc, error);
    if (int rc =
            load_inner_transport(ctx->cfg.inner, ctx->cfg.inner_path, g_host, ctx->inner, error);
        rc != CHORUS_OK)
      return set_last_error(rc, error);
    std::vector<chorus_kv_t> kv;
    for (const auto& s : ctx->cfg.inner_settings)
      kv.push_back({s.key.c_str(), s.value.c_str(), s.origin.c_str()});
    chorus_tp_context_info_t inner_info{};
    inner_info.struct_size = sizeof inner_info;
    inner_info.rank = info->rank;
    inner_info.size = info->size;
    inner_info.bind_address = info->bind_address;
    inner_info.config = kv.empty() ? nullptr : kv.data();
    inner_info.config_count = kv.size();
    // Minor 3: the inner transport names the notice endpoint as the core does.
    inner_info.data_channels = chorus::data_channels_of(*info);
    if (int rc = ctx->ops().context_open(&inner_info, &ctx->ictx); rc != CHORUS_OK)
      return ctx->forward_error(rc, "context_open");
    ctx->caps.struct_size = sizeof ctx->caps;
    if (int rc = ctx->ops().get_caps(ctx->ictx, &ctx->caps); rc != CHORUS_OK) {
      int status = ctx->forward_error(rc, "get_caps");
      ctx->ops().context_close(ctx->ictx);
      return status;
    }
    // Immediates only when the inner table can carry them, whatever its caps say.
    if (!ctx->inner->has_post_send_imm()) ctx->caps.flags &= ~uint32_t{CHORUS_TP_CAP_IMM_DATA};
    // Its poll counts every completion as a send or a receive: no polled
    // connects (and so no connect requests) through it.
    ctx->caps.flags &= ~uint32_t{CHORUS_TP_CAP_CONNECT_POLL};
    ctx->rank = info->rank;
    ctx->data_channels = inner_info.data_channels;
    ctx->rng.seed(ctx->cfg.seed ^ (0x9E3779B97F4A7C15ull * uint64_t(info->rank + 1)));
    const FaultConfig& c = ctx->cfg;
    if (c.drop_after || c.delay_us || c.error_after)
      log(CHORUS_LOG_INFO, "rank " + std::to_string(info->rank) + " wraps '" + ctx->ops().name +
                               "' with drop_after=" + std::to_string(c.drop_after) +
                               " delay_us=" + std::to_string(c.delay_us) + " error_after=" +
                               std::to_string(c.error_after) + " seed=" + std::to_string(c.seed));
    *ctx_out = ctx.release();
    return CHORUS_OK;
  });
}

int faulty_context_close(chorus_tp_context_t* ctx) {
  if (!ctx) return null_argument("context_close");
  return guarded("context_close", [&]() -> int {
    // The inner transport closes the endpoints still open.
    int rc = ctx->ops().context_close(ctx->ictx);
    if (rc != CHORUS_OK) rc = ctx->forward_error(rc, "context_close");
    delete ctx;
    return rc;
  });
}

int faulty_get_caps(chorus_tp_context_t* ctx, chorus_tp_caps_t* caps_out) {
  if (!ctx || !caps_out) return null_argument("get_caps");
  return provider::copy_caps(ctx->caps, caps_out);
}

int faulty_endpoint_open(chorus_tp_context_t* ctx, int peer_rank, int channel, void* address_out,
                         size_t* address_len, chorus_tp_endpoint_t** ep_out) {
  if (!ctx || !address_len || !ep_out) return null_argument("endpoint_open");
  return guarded("endpoint_open", [&]() -> int {
    auto ep = std::make_unique<chorus_tp_endpoint>();
    // The blob is the inner transport's own: the peer's faulty hands it on.
    if (int rc = ctx->ops().endpoint_open(ctx->ictx, peer_rank, channel, address_out, address_len,
                                          &ep->inner);
        rc != CHORUS_OK)
      return ctx->forward_error(rc, "endpoint_open");
    ep->ctx = ctx;
    ep->peer = peer_rank;
    ep->channel = channel;
    ctx->by_inner[ep->inner] = ep.get();
    *ep_out = ep.get();
    ctx->endpoints.push_back(std::move(ep));
    return CHORUS_OK;
  });
}

int faulty_endpoint_connect(chorus_tp_endpoint_t* ep, const void* peer_address, size_t length,
                            int timeout_ms) {
  if (!ep) return null_argument("endpoint_connect");
  return guarded("endpoint_connect", [&]() -> int {
    if (ep->dropped) return set_last_error(CHORUS_ERR_PEER_LOST, ep->drop_reason);
    // Always blocking (the cap is masked above): 0, an expired deadline,
    // must not become the inner transport's polled connect.
    int rc = ep->ctx->ops().endpoint_connect(ep->inner, peer_address, length,
                                             timeout_ms == 0 ? 1 : timeout_ms);
    return rc == CHORUS_OK ? rc : ep->ctx->forward_error(rc, "endpoint_connect");
  });
}

int faulty_endpoint_close(chorus_tp_endpoint_t* ep) {
  if (!ep) return null_argument("endpoint_close");
  return guarded("endpoint_close", [&]() -> int {
    chorus_tp_context* ctx = ep->ctx;
    // Posts of a closed endpoint vanish, whether queued here or in the inner transport.
    std::erase_if(ctx->queue, [&](const chorus_tp_context::Entry& e) { return e.ep == ep; });
    ctx->held -= ep->held.size();
    int rc = CHORUS_OK;
    if (ep->inner) {
      ctx->by_inner.erase(ep->inner);
      rc = ctx->ops().endpoint_close(ep->inner);
      if (rc != CHORUS_OK) rc = ctx->forward_error(rc, "endpoint_close");
    }
    std::erase_if(ctx->endpoints, [&](const auto& owned) { return owned.get() == ep; });
    return rc;
  });
}

int faulty_mem_register(chorus_tp_context_t* ctx, void* addr, size_t length, int mem_kind,
                        chorus_tp_mr_t** mr_out) {
  if (!ctx || !mr_out) return null_argument("mem_register");
  int rc = ctx->ops().mem_register(ctx->ictx, addr, length, mem_kind, mr_out);
  return rc == CHORUS_OK ? rc : ctx->forward_error(rc, "mem_register");
}

int faulty_mem_deregister(chorus_tp_context_t* ctx, chorus_tp_mr_t* mr) {
  if (!ctx) return null_argument("mem_deregister");
  int rc = ctx->ops().mem_deregister(ctx->ictx, mr);
  return rc == CHORUS_OK ? rc : ctx->forward_error(rc, "mem_deregister");
}

/// post_send and post_send_imm: the same faults, the same queues.
int post_send_common(const char* op, chorus_tp_endpoint_t* ep, const void* buf, size_t length,
                     chorus_tp_mr_t* mr, uint64_t wr_id, bool with_imm, uint32_t imm) {
  if (!ep) return null_argument(op);
  return guarded(op, [&]() -> int {
    chorus_tp_context* ctx = ep->ctx;
    if (with_imm && !(ctx->caps.flags & CHORUS_TP_CAP_IMM_DATA))
      return set_last_error(CHORUS_ERR_NOT_SUPPORTED,
                            std::string("faulty: post_send_imm: inner transport '") +
                                ctx->ops().name + "' does not carry immediates");
    if (ep->dropped) return set_last_error(CHORUS_ERR_PEER_LOST, ep->drop_reason);
    if (ep->out_sends >= ctx->caps.max_outstanding_sends)
      return set_last_error(CHORUS_ERR_AGAIN, std::string("faulty: ") + op + ": " +
                                                  std::to_string(ep->out_sends) +
                                                  " sends to rank " + std::to_string(ep->peer) +
                                                  " outstanding; reap completions first");
    if (ctx->cfg.drop_after && ep->sends >= ctx->cfg.drop_after) {
      ++ep->out_sends;
      ctx->drop(ep, wr_id);
      return CHORUS_OK;
    }
    if (ctx->cfg.delay_us) {
      ep->held.push_back({ctx->due_time(ep), buf, length, mr, wr_id, with_imm, imm});
      ++ctx->held;
    } else {
      int rc = ctx->post_inner(ep->inner, buf, length, mr, wr_id, with_imm, imm);
      if (rc != CHORUS_OK) return ctx->forward_error(rc, op);
      ep->inner_sends.push_back(wr_id);
    }
    ++ep->sends;
    ++ep->out_sends;
    return CHORUS_OK;
  });
}

int faulty_post_send(chorus_tp_endpoint_t* ep, const void* buf, size_t length, chorus_tp_mr_t* mr,
                     uint64_t wr_id) {
  return post_send_common("post_send", ep, buf, length, mr, wr_id, false, 0);
}

int faulty_post_send_imm(chorus_tp_endpoint_t* ep, const void* buf, size_t length,
                         chorus_tp_mr_t* mr, uint64_t wr_id, uint32_t imm) {
  return post_send_common("post_send_imm", ep, buf, length, mr, wr_id, true, imm);
}

int faulty_post_recv(chorus_tp_endpoint_t* ep, void* buf, size_t length, chorus_tp_mr_t* mr,
                     uint64_t wr_id) {
  if (!ep) return null_argument("post_recv");
  return guarded("post_recv", [&]() -> int {
    chorus_tp_context* ctx = ep->ctx;
    if (ep->dropped) return set_last_error(CHORUS_ERR_PEER_LOST, ep->drop_reason);
    if (ep->out_recvs >= ctx->caps.max_outstanding_recvs)
      return set_last_error(CHORUS_ERR_AGAIN,
                            "faulty: post_recv: " + std::to_string(ep->out_recvs) +
                                " receives from rank " + std::to_string(ep->peer) +
                                " outstanding; reap completions first");
    int rc = ctx->ops().post_recv(ep->inner, buf, length, mr, wr_id);
    if (rc != CHORUS_OK) return ctx->forward_error(rc, "post_recv");
    ep->inner_recvs.push_back(wr_id);
    ++ep->out_recvs;
    return CHORUS_OK;
  });
}

int faulty_poll(chorus_tp_context_t* ctx, chorus_tp_completion_t* out, size_t max) {
  if (!ctx || (!out && max > 0)) return null_argument("poll");
  return guarded("poll", [&]() -> int {
    ctx->flush_due(Clock::now());
    if (ctx->queue.size() < max) {
      int rc = ctx->pump_inner();
      if (rc != CHORUS_OK && ctx->queue.empty()) return rc;
    }
    size_t n = 0;
    while (n < max && !ctx->queue.empty() && !ctx->queue.front().failed) {
      out[n++] = ctx->queue.front().ok;
      chorus_tp_context::reap(ctx->queue.front());
      ctx->queue.pop_front();
    }
    if (n == 0 && !ctx->queue.empty())
      return set_last_error(CHORUS_ERR_PENDING,
                            "faulty: poll: the oldest completion failed; read it with read_error");
    return static_cast<int>(n);
  });
}

int faulty_read_error(chorus_tp_context_t* ctx, chorus_tp_error_t* err_out) {
  if (!ctx || !err_out) return null_argument("read_error");
  return guarded("read_error", [&]() -> int {
    auto it = std::find_if(ctx->queue.begin(), ctx->queue.end(),
                           [](const chorus_tp_context::Entry& e) { return e.failed; });
    if (it == ctx->queue.end())
      return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                            "faulty: read_error: no failed completion is pending");
    *err_out = it->err;
    chorus_tp_context::reap(*it);
    ctx->queue.erase(it);
    return CHORUS_OK;
  });
}

int faulty_wait(chorus_tp_context_t* ctx, int timeout_ms) {
  if (!ctx) return null_argument("wait");
  return guarded("wait", [&]() -> int {
    if (!ctx->queue.empty()) return CHORUS_OK;
    Clock::time_point now = Clock::now();
    ctx->flush_due(now);
    if (!ctx->queue.empty()) return CHORUS_OK;
    // Sleep in the inner transport, but no longer than the next held send is
    // due; that wake-up posts it and counts as a (spurious) return.
    int timeout = timeout_ms;
    bool cut = false;
    if (auto due = ctx->next_due()) {
      auto us = std::chrono::duration_cast<std::chrono::microseconds>(*due - now).count();
      int ms = us <= 0 ? 0 : static_cast<int>(std::min<long long>((us + 999) / 1000, 1 << 30));
      if (timeout < 0 || ms < timeout) {
        timeout = ms;
        cut = true;
      }
    }
    int rc = ctx->ops().wait(ctx->ictx, timeout);
    if (rc == CHORUS_ERR_TIMEOUT && cut) {
      ctx->flush_due(Clock::now());
      return CHORUS_OK;
    }
    return rc == CHORUS_OK ? rc : ctx->forward_error(rc, "wait");
  });
}

int faulty_interrupt(chorus_tp_context_t* ctx) {
  if (!ctx) return null_argument("interrupt");
  if (!ctx->inner->has_interrupt())
    return set_last_error(CHORUS_ERR_NOT_SUPPORTED, std::string("faulty: inner transport '") +
                                                        ctx->ops().name + "' has no interrupt");
  int rc = ctx->ops().interrupt(ctx->ictx);
  return rc == CHORUS_OK ? rc : ctx->forward_error(rc, "interrupt");
}

int faulty_describe(char* buf, size_t len) {
  if (!buf || len == 0) return CHORUS_ERR_INVALID_ARGUMENT;
  std::snprintf(buf, len, "%s",
                "fault injector over transport.faulty.inner (default tcp); drop_after, delay_us "
                "and error_after are off unless set");
  return CHORUS_OK;
}

}  // namespace
}  // namespace chorus::faulty

extern "C" __attribute__((visibility("default")))
const chorus_transport_plugin_v1_t chorus_transport_plugin_v1 = {
    sizeof(chorus_transport_plugin_v1_t),
    CHORUS_TRANSPORT_ABI_MINOR,
    "faulty",
    chorus::faulty::faulty_init,
    chorus::faulty::faulty_fini,
    chorus::faulty::faulty_last_error,
    chorus::faulty::faulty_context_open,
    chorus::faulty::faulty_context_close,
    chorus::faulty::faulty_get_caps,
    chorus::faulty::faulty_endpoint_open,
    chorus::faulty::faulty_endpoint_connect,
    chorus::faulty::faulty_endpoint_close,
    chorus::faulty::faulty_mem_register,
    chorus::faulty::faulty_mem_deregister,
    chorus::faulty::faulty_post_send,
    chorus::faulty::faulty_post_recv,
    chorus::faulty::faulty_poll,
    chorus::faulty::faulty_read_error,
    chorus::faulty::faulty_wait,
    chorus::faulty::faulty_interrupt,
    chorus::faulty::faulty_describe,
    // wait_fd (minor 4): none. Delays are injected in poll and wait; a caller
    // sleeping on the inner transport's fd instead would bypass them.
    nullptr,
    // post_send_imm (minor 5): always in the table, since the inner transport
    // is chosen per context; NOT_SUPPORTED where the context has no
    // CHORUS_TP_CAP_IMM_DATA.
    chorus::faulty::faulty_post_send_imm,
};
