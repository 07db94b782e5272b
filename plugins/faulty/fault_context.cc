// The bodies of chorus_tp_context's methods (fault_context.h): the queue of
// completions for the caller, moving the inner transport's completions into
// it with error_after applied, held sends (delay_us), and drop_after's
// dropped connection.
#include "fault_context.h"

#include <chorus/provider/error.hpp>
#include <chorus/provider/log.hpp>
#include <chorus/transport_names.hpp>

#include <algorithm>
#include <cstdio>
#include <string_view>

namespace chorus::faulty {
namespace {
using provider::log;
}  // namespace
}  // namespace chorus::faulty

int chorus_tp_context::post_inner(chorus_tp_endpoint_t* iep, const void* buf, size_t length,
                                  chorus_tp_mr_t* mr, uint64_t wr_id, bool with_imm,
                                  uint32_t imm) const {
  return with_imm ? ops().post_send_imm(iep, buf, length, mr, wr_id, imm)
                  : ops().post_send(iep, buf, length, mr, wr_id);
}

int chorus_tp_context::forward_error(int rc, const char* op) const {
  return chorus::provider::set_last_error(rc, std::string("faulty: inner transport '") +
                                                  ops().name + "': " + op + ": " +
                                                  ops().last_error());
}

void chorus_tp_context::push_ok(chorus_tp_endpoint* ep, const chorus_tp_completion_t& c) {
  Entry e;
  e.ep = ep;
  e.ok = c;
  e.ok.endpoint = ep;
  queue.push_back(e);
}

void chorus_tp_context::push_error(chorus_tp_endpoint* ep, uint32_t opcode, uint64_t wr_id,
                                   int status, const std::string& message) {
  Entry e;
  e.ep = ep;
  e.failed = true;
  e.err.wr_id = wr_id;
  e.err.opcode = opcode;
  e.err.status = status;
  e.err.peer_rank = ep->peer;
  e.err.endpoint = ep;
  std::snprintf(e.err.message, sizeof e.err.message, "%s", message.c_str());
  queue.push_back(e);
}

void chorus_tp_context::retire(chorus_tp_endpoint* ep, uint32_t opcode) {
  auto& q = opcode == CHORUS_TP_SEND ? ep->inner_sends : ep->inner_recvs;
  if (!q.empty()) q.pop_front();
}

void chorus_tp_context::reap(const Entry& e) {
  uint32_t opcode = e.failed ? e.err.opcode : e.ok.opcode;
  if (opcode == CHORUS_TP_SEND)
    --e.ep->out_sends;
  else
    --e.ep->out_recvs;
}

void chorus_tp_context::accept(const chorus_tp_completion_t& c) {
  auto it = by_inner.find(c.endpoint);
  if (it == by_inner.end()) return;  // closed or dropped meanwhile
  chorus_tp_endpoint* ep = it->second;
  retire(ep, c.opcode);
  ++completions;
  if (cfg.error_after && !injected && completions > cfg.error_after) {
    injected = true;
    std::string what = "faulty: injected error (error_after=" + std::to_string(cfg.error_after) +
                       "): completion " + std::to_string(completions) + " of rank " +
                       std::to_string(rank) + ", a " +
                       (c.opcode == CHORUS_TP_SEND ? "send to" : "receive from") + " rank " +
                       std::to_string(ep->peer) + ", is reported as failed";
    chorus::faulty::log(CHORUS_LOG_WARN, std::string_view(what).substr(sizeof "faulty: " - 1));
    push_error(ep, c.opcode, c.wr_id, CHORUS_ERR_SYSTEM, what);
    return;
  }
  push_ok(ep, c);
}

void chorus_tp_context::accept_error(const chorus_tp_error_t& err) {
  auto it = by_inner.find(err.endpoint);
  if (it == by_inner.end()) return;
  chorus_tp_endpoint* ep = it->second;
  retire(ep, err.opcode);
  Entry e;
  e.ep = ep;
  e.failed = true;
  e.err = err;
  e.err.endpoint = ep;
  queue.push_back(e);
}

int chorus_tp_context::pump_inner() {
  chorus_tp_completion_t buf[64];
  for (;;) {
    int n = ops().poll(ictx, buf, 64);
    if (n == 0) return CHORUS_OK;
    if (n > 0) {
      for (int i = 0; i < n; ++i) accept(buf[i]);
      continue;
    }
    if (n != CHORUS_ERR_PENDING) return forward_error(n, "poll");
    chorus_tp_error_t err{};
    if (int rc = ops().read_error(ictx, &err); rc != CHORUS_OK)
      return forward_error(rc, "read_error");
    err.message[sizeof err.message - 1] = '\0';
    accept_error(err);
  }
}

void chorus_tp_context::flush_due(chorus::faulty::Clock::time_point now) {
  if (held == 0) return;
  for (auto& owned : endpoints) {
    chorus_tp_endpoint* ep = owned.get();
    ep->held_blocked = false;
    while (!ep->held.empty() && ep->held.front().due <= now) {
      const chorus::faulty::HeldSend h = ep->held.front();
      int rc = post_inner(ep->inner, h.buf, h.length, h.mr, h.wr_id, h.with_imm, h.imm);
      if (rc == CHORUS_ERR_AGAIN) {
        ep->held_blocked = true;
        break;
      }
      ep->held.pop_front();
      --held;
      if (rc == CHORUS_OK) {
        ep->inner_sends.push_back(h.wr_id);
      } else {
        push_error(ep, CHORUS_TP_SEND, h.wr_id, rc,
                   std::string("faulty: posting a delayed send to rank ") +
                       std::to_string(ep->peer) + " failed: " + ops().last_error());
      }
    }
  }
}

std::optional<chorus::faulty::Clock::time_point> chorus_tp_context::next_due() const {
  std::optional<chorus::faulty::Clock::time_point> best;
  if (held == 0) return best;
  for (const auto& ep : endpoints)
    if (!ep->held.empty() && !ep->held_blocked && (!best || ep->held.front().due < *best))
      best = ep->held.front().due;
  return best;
}

chorus::faulty::Clock::time_point chorus_tp_context::due_time(const chorus_tp_endpoint* ep) {
  uint64_t us = cfg.delay_us;
  if (cfg.seed != 0) us = std::uniform_int_distribution<uint64_t>(0, 2 * cfg.delay_us)(rng);
  auto due = chorus::faulty::Clock::now() + std::chrono::microseconds(us);
  // Per endpoint, sends leave in post order whatever their delays.
  if (!ep->held.empty()) due = std::max(due, ep->held.back().due);
  return due;
}

void chorus_tp_context::drop(chorus_tp_endpoint* ep, uint64_t trigger) {
  pump_inner();  // what has already finished completes normally
  ep->dropped = true;
  ep->drop_reason = "faulty: dropped the connection to rank " + std::to_string(ep->peer) + " (" +
                    chorus::channel_name(ep->channel, data_channels) + ") after " +
                    std::to_string(ep->sends) +
                    " sends (drop_after=" + std::to_string(cfg.drop_after) + ")";
  chorus::faulty::log(CHORUS_LOG_WARN, "rank " + std::to_string(rank) + ": " +
                                           ep->drop_reason.substr(sizeof "faulty: " - 1));
  if (ep->inner) {
    by_inner.erase(ep->inner);
    ops().endpoint_close(ep->inner);
    ep->inner = nullptr;
  }
  for (uint64_t wr : ep->inner_recvs)
    push_error(ep, CHORUS_TP_RECV, wr, CHORUS_ERR_PEER_LOST, ep->drop_reason);
  for (uint64_t wr : ep->inner_sends)
    push_error(ep, CHORUS_TP_SEND, wr, CHORUS_ERR_PEER_LOST, ep->drop_reason);
  for (const auto& h : ep->held)
    push_error(ep, CHORUS_TP_SEND, h.wr_id, CHORUS_ERR_PEER_LOST, ep->drop_reason);
  push_error(ep, CHORUS_TP_SEND, trigger, CHORUS_ERR_PEER_LOST, ep->drop_reason);
  held -= ep->held.size();
  ep->held.clear();
  ep->inner_recvs.clear();
  ep->inner_sends.clear();
}
