// The composite's endpoints and data path: endpoint_open opens a
// sub-endpoint in both sub-contexts and writes one blob with this rank's
// host identity; endpoint_connect chooses the sub-transport for the peer from
// the two identities (auto_use_local), closes the other sub-endpoint and
// connects the chosen one, blocking or, when every sub-transport in use has
// CHORUS_TP_CAP_CONNECT_POLL, polled (P10); then posts, poll (merging both
// sub-contexts' completions and passing connect requests on) and read_error.
#include "core/auto_internal.h"

#include <chorus/transport_names.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

namespace chorus::core::auto_detail {

int auto_endpoint_open(chorus_tp_context_t* c, int peer_rank, int channel, void* address_out,
                       size_t* address_len, chorus_tp_endpoint_t** ep_out) {
  if (!c || !address_out || !address_len || !ep_out)
    return fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_open: NULL argument");
  AutoContext* ctx = from(c);
  auto ep = std::make_unique<AutoEndpoint>();
  ep->owner = ctx;
  ep->peer = peer_rank;
  ep->channel = channel;
  AutoBlob blob;
  blob.host_id = ctx->host_id;
  blob.local_name = ctx->subs[kLocal].name;
  blob.fabric_name = ctx->subs[kFabric].name;
  int rc = CHORUS_OK;
  for (int slot : {kLocal, kFabric}) {
    Sub& sub = ctx->subs[slot];
    std::vector<std::byte>& out = slot == kLocal ? blob.local : blob.fabric;
    // An empty local address tells the peer that this endpoint has no local
    // half: the pair then uses the fabric, whatever the hosts.
    if (slot == kLocal && !ctx->has_local()) continue;
    out.resize(sub.caps.max_address_size ? sub.caps.max_address_size : 1024);
    size_t len = out.size();
    int orc = sub.tp->endpoint_open(sub.ctx, peer_rank, channel, out.data(), &len, &ep->sub[slot]);
    if (orc != CHORUS_OK && orc != CHORUS_ERR_INVALID_ARGUMENT && slot == kLocal) {
      // Out of shared memory, or refused: this pair falls back to the fabric.
      ep->sub[slot] = nullptr;
      out.clear();
      ctx->warn_local_fallback("could not open an endpoint to rank " + std::to_string(peer_rank) +
                               " (" + sub.tp->last_error() + ")");
      continue;
    }
    if (orc != CHORUS_OK) {
      ep->sub[slot] = nullptr;
      rc = sub.pass_on(orc, "endpoint_open");
      break;
    }
    ++sub.endpoints;
    ctx->by_sub[slot][ep->sub[slot]] = ep.get();
    out.resize(len);
  }
  Result<std::vector<std::byte>> encoded = Status(CHORUS_ERR_INTERNAL, "not encoded");
  if (rc == CHORUS_OK) {
    encoded = auto_blob_encode(blob);
    if (!encoded.is_ok())
      rc = fail(encoded.status().code(), "endpoint_open: " + encoded.status().message());
    else if (encoded->size() > *address_len)
      rc = fail(CHORUS_ERR_INVALID_ARGUMENT,
                "endpoint_open: the address buffer holds " + std::to_string(*address_len) +
                    " bytes; this endpoint's address needs " + std::to_string(encoded->size()) +
                    " (max_address_size is " + std::to_string(ctx->caps.max_address_size) + ")");
  }
  if (rc != CHORUS_OK) {
    std::string why = t_error;
    int ignored = CHORUS_OK;
    for (int slot : {kLocal, kFabric}) ctx->close_sub_endpoint(*ep, slot, ignored);
    return fail(rc, why);
  }
  std::memcpy(address_out, encoded->data(), encoded->size());
  *address_len = encoded->size();
  *ep_out = reinterpret_cast<chorus_tp_endpoint_t*>(ep.get());
  ctx->endpoints.push_back(std::move(ep));
  return CHORUS_OK;
}

int auto_endpoint_connect(chorus_tp_endpoint_t* e, const void* peer_address, size_t length,
                          int timeout_ms) {
  if (!e || (!peer_address && length > 0))
    return fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_connect: NULL argument");
  AutoEndpoint* ep = from(e);
  AutoContext* ctx = ep->owner;
  // A polled connect (P10) exists only when every sub-transport in use has
  // it; otherwise 0, an expired deadline, stays a (short) blocking connect.
  const bool polled = timeout_ms == 0 && (ctx->caps.flags & CHORUS_TP_CAP_CONNECT_POLL);
  if (polled && ep->up) return CHORUS_OK;
  if (ep->chosen >= 0 && !polled)
    return fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_connect: the endpoint to rank " +
                                                 std::to_string(ep->peer) +
                                                 " is already connected or connecting");
  auto blob = auto_blob_decode({static_cast<const std::byte*>(peer_address), length});
  if (!blob.is_ok())
    return fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_connect: rank " + std::to_string(ep->peer) +
                                                 " sent no auto transport address (" +
                                                 blob.status().message() +
                                                 "); give every rank transport.name = \"auto\"");
  if (blob->local_name != ctx->subs[kLocal].name || blob->fabric_name != ctx->subs[kFabric].name)
    return fail(CHORUS_ERR_INVALID_ARGUMENT,
                "endpoint_connect: rank " + std::to_string(ep->peer) + " uses auto with local '" +
                    blob->local_name + "' and fabric '" + blob->fabric_name +
                    "', this rank with '" + ctx->subs[kLocal].name + "' and '" +
                    ctx->subs[kFabric].name +
                    "'; give every rank the same transport.auto settings");
  // Repeated polled connects keep going to the sub-endpoint the first one
  // chose; the other one is closed then.
  const bool first = ep->chosen < 0;
  const int slot = first ? auto_choose_slot(*ctx, *blob, ep->sub[kLocal] != nullptr) : ep->chosen;
  if (first && ep->requested >= 0 && ep->requested != slot)
    return fail(CHORUS_ERR_INTERNAL,
                "endpoint_connect: rank " + std::to_string(ep->peer) + " asked to connect over " +
                    ctx->subs[ep->requested].name + " but this rank chose " + ctx->subs[slot].name +
                    " for the pair (host identity '" + ctx->host_id + "', the peer's '" +
                    blob->host_id + "'); this is a bug in auto");
  if (first) {
    int ignored = CHORUS_OK;
    ctx->close_sub_endpoint(*ep, 1 - slot, ignored);
    ep->chosen = slot;
    ++ctx->subs[slot].chosen;
  }
  Sub& sub = ctx->subs[slot];
  const std::vector<std::byte>& theirs = slot == kLocal ? blob->local : blob->fabric;
  // Not polled: 0, an expired deadline, must not become a polled connect of
  // a sub-transport that has the cap.
  int rc = sub.tp->endpoint_connect(ep->sub[slot], theirs.data(), theirs.size(),
                                    polled            ? 0
                                    : timeout_ms == 0 ? 1
                                                      : timeout_ms);
  if (polled && rc == CHORUS_ERR_AGAIN) return rc;
  if (rc != CHORUS_OK)
    return fail(rc,
                std::string(polled ? "polled endpoint_connect over " : "endpoint_connect over ") +
                    sub.name + (slot == kLocal ? " (same host)" : " (other host)") + ": " +
                    sub.tp->last_error());
  ep->up = true;
  log_host(CHORUS_LOG_DEBUG,
           "auto: rank " + std::to_string(ctx->rank) + " -> rank " + std::to_string(ep->peer) +
               " " + channel_name(ep->channel, ctx->data_channels) + " over " + sub.name);
  return CHORUS_OK;
}

int auto_endpoint_close(chorus_tp_endpoint_t* e) {
  if (!e) return fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_close: NULL endpoint");
  AutoEndpoint* ep = from(e);
  AutoContext* ctx = ep->owner;
  int rc = CHORUS_OK;
  for (int slot : {kLocal, kFabric}) ctx->close_sub_endpoint(*ep, slot, rc);
  std::erase_if(ctx->endpoints, [&](const auto& p) { return p.get() == ep; });
  return rc;
}

namespace {

/// The connected sub-endpoint behind `e`, or a failure status.
int connected(chorus_tp_endpoint_t* e, const char* what, AutoEndpoint*& ep) {
  if (!e) return fail(CHORUS_ERR_INVALID_ARGUMENT, std::string(what) + ": NULL endpoint");
  ep = from(e);
  if (ep->chosen < 0)
    return fail(CHORUS_ERR_INVALID_ARGUMENT, std::string(what) + ": the endpoint to rank " +
                                                 std::to_string(ep->peer) +
                                                 " is not connected yet");
  if (!ep->sub[ep->chosen])
    return fail(CHORUS_ERR_INVALID_ARGUMENT, std::string(what) + ": the endpoint is closed");
  return CHORUS_OK;
}

/// Whether a connect request that sub-context `slot` raised on `outer` goes
/// on to the core (P10): once per composite endpoint, and not once its own
/// endpoint_connect has run (the request is then already answered). An
/// endpoint closed meanwhile has no composite endpoint any more.
bool pass_request(int slot, chorus_tp_endpoint_t* outer) {
  if (!outer) return false;
  AutoEndpoint* ep = from(outer);
  if (ep->chosen >= 0 || ep->requested >= 0) return false;
  ep->requested = slot;
  return true;
}

}  // namespace

int auto_post_send(chorus_tp_endpoint_t* e, const void* buf, size_t length, chorus_tp_mr_t* mr,
                   uint64_t wr_id) {
  AutoEndpoint* ep = nullptr;
  if (int rc = connected(e, "post_send", ep); rc != CHORUS_OK) return rc;
  const Sub& sub = ep->owner->subs[ep->chosen];
  int rc = sub.tp->post_send(ep->sub[ep->chosen], buf, length,
                             mr ? from(mr)->sub[ep->chosen] : nullptr, wr_id);
  return rc == CHORUS_OK ? rc : sub.pass_on(rc, "post_send");
}

int auto_post_send_imm(chorus_tp_endpoint_t* e, const void* buf, size_t length, chorus_tp_mr_t* mr,
                       uint64_t wr_id, uint32_t imm) {
  AutoEndpoint* ep = nullptr;
  if (int rc = connected(e, "post_send_imm", ep); rc != CHORUS_OK) return rc;
  const Sub& sub = ep->owner->subs[ep->chosen];
  if (!sub.has_imm())
    return fail(CHORUS_ERR_NOT_SUPPORTED, "post_send_imm: the endpoint to rank " +
                                              std::to_string(ep->peer) + " uses " + sub.name +
                                              ", which carries no immediates");
  int rc = sub.tp->post_send_imm(ep->sub[ep->chosen], buf, length,
                                 mr ? from(mr)->sub[ep->chosen] : nullptr, wr_id, imm);
  return rc == CHORUS_OK ? rc : sub.pass_on(rc, "post_send_imm");
}

int auto_post_recv(chorus_tp_endpoint_t* e, void* buf, size_t length, chorus_tp_mr_t* mr,
                   uint64_t wr_id) {
  AutoEndpoint* ep = nullptr;
  if (int rc = connected(e, "post_recv", ep); rc != CHORUS_OK) return rc;
  const Sub& sub = ep->owner->subs[ep->chosen];
  int rc = sub.tp->post_recv(ep->sub[ep->chosen], buf, length,
                             mr ? from(mr)->sub[ep->chosen] : nullptr, wr_id);
  return rc == CHORUS_OK ? rc : sub.pass_on(rc, "post_recv");
}

int auto_poll(chorus_tp_context_t* c, chorus_tp_completion_t* out, size_t max) {
  if (!c || (!out && max > 0)) return fail(CHORUS_ERR_INVALID_ARGUMENT, "poll: NULL argument");
  AutoContext* ctx = from(c);
  if (ctx->fds.active()) ctx->fds.drain_wake();
  if (ctx->pending_error >= 0) return CHORUS_ERR_PENDING;
  // Each endpoint lives in one sub-context, so merging the two streams keeps
  // every endpoint's completions in post order. Which sub-context goes first
  // alternates, so a busy one cannot starve the other when `max` is small.
  const int first = ctx->poll_first;
  ctx->poll_first ^= 1;
  size_t n = 0;
  for (int k = 0; k < 2 && n < max; ++k) {
    const int slot = first ^ k;
    Sub& sub = ctx->subs[slot];
    // A sub-context with no endpoint has nothing to report (a closed
    // endpoint's completions are dropped): skip its poll, which for tcp is a
    // system call, on every poll of a job that has no peer over it.
    if (!sub.ctx || sub.endpoints == 0) continue;
    // Endpoints no connect chose yet (tagged pairs waiting for their first
    // use, P10) can only raise a connect request: a sub-context holding
    // nothing else is polled at most once a millisecond, so a job whose
    // peers all share its host does not pay the fabric's poll (for tcp a
    // system call) on every poll. A request waits that much longer.
    if (sub.chosen == 0) {
      const auto now = std::chrono::steady_clock::now();
      if (now < sub.idle_poll_due) continue;
      sub.idle_poll_due = now + std::chrono::milliseconds(1);
    }
    int got = sub.tp->poll(sub.ctx, out + n, max - n);
    if (got == CHORUS_ERR_PENDING) {
      ctx->pending_error = slot;
      break;
    }
    if (got < 0) {
      // Completions already taken from the other sub-context would be lost
      // with this status; they are returned now and the failure stays sticky
      // in the sub-transport for the next poll.
      if (n > 0) break;
      return sub.pass_on(got, "poll");
    }
    size_t kept = n;
    for (size_t i = n; i < n + size_t(got); ++i) {
      chorus_tp_completion_t done = out[i];
      done.endpoint = ctx->outer(slot, done.endpoint);
      if (done.opcode == CHORUS_TP_OP_CONNECT_REQUEST && !pass_request(slot, done.endpoint))
        continue;
      out[kept++] = done;
    }
    n = kept;
  }
  if (n == 0 && ctx->pending_error >= 0) return CHORUS_ERR_PENDING;
  return int(n);
}

int auto_read_error(chorus_tp_context_t* c, chorus_tp_error_t* err_out) {
  if (!c || !err_out) return fail(CHORUS_ERR_INVALID_ARGUMENT, "read_error: NULL argument");
  AutoContext* ctx = from(c);
  const int order[2] = {ctx->pending_error >= 0 ? ctx->pending_error : kLocal,
                        ctx->pending_error >= 0 ? 1 - ctx->pending_error : kFabric};
  ctx->pending_error = -1;
  for (int slot : order) {
    Sub& sub = ctx->subs[slot];
    if (!sub.ctx) continue;
    chorus_tp_error_t err{};
    if (sub.tp->read_error(sub.ctx, &err) != CHORUS_OK) continue;
    err.endpoint = ctx->outer(slot, err.endpoint);
    err.message[sizeof err.message - 1] = '\0';
    std::string text = sub.name + ": " + err.message;
    std::snprintf(err.message, sizeof err.message, "%s", text.c_str());
    *err_out = err;
    return CHORUS_OK;
  }
  return fail(CHORUS_ERR_INVALID_ARGUMENT, "read_error: no failed completion to read");
}

}  // namespace chorus::core::auto_detail
