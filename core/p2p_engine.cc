// Tagged point-to-point: the wire protocol (eager, rendezvous, refusal),
// matching, and completion routing of the P2pEngine (core/p2p_engine.h).
// Failures, deadlines and finalize are in p2p_engine_peers.cc.
//
// Every message on a control endpoint starts with a 32-byte Header.
//  - kEager: header and payload (at most kEagerBytes) in one message; the
//    send completes when the transport has taken it.
//  - kRts: a larger send asks to send; the receiver matches it like an eager
//    message, posts the receive of the data on the bulk endpoint straight
//    into the caller's buffer, then answers kCts with the send's number.
//    The sender then posts the data on its bulk endpoint. Both sides post
//    bulk traffic in clear-to-send order, so the transport's in-order
//    delivery pairs them.
//  - kNack: the matched receive cannot take the message (another dtype, or
//    larger than the buffer): the send fails with MISMATCH, as the receive
//    does; nothing is written.
// Headers are host-endian: ranks of one job share an architecture (the
// reduction kernels assume it too).

#include "core/p2p_engine.h"

#include <chorus/chorus.h>

#include "core/communicator.h"
#include "core/log.h"
#include "core/p2p_wire.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace chorus::core {

using namespace p2p_wire;

namespace {

std::string tag_text(int tag) {
  return tag == CHORUS_ANY_TAG ? std::string("any tag") : "tag " + std::to_string(tag);
}

}  // namespace

P2pEngine::P2pEngine(const chorus_transport_plugin_v1_t* tp, chorus_tp_context_t* ctx,
                     const chorus_tp_caps_t& caps, int rank, int size, Hooks hooks)
    : tp_(tp), ctx_(ctx), caps_(caps), rank_(rank), size_(size), hooks_(std::move(hooks)) {
  max_msg_ = size_t(
      std::min<uint64_t>(caps_.max_message_size ? caps_.max_message_size : 1u << 30, 1ull << 30));
  eps_[0].assign(size_t(size_), nullptr);
  eps_[1].assign(size_t(size_), nullptr);
  peers_.resize(size_t(size_));
}

P2pEngine::~P2pEngine() {
  close();
  if (slots_mr_) tp_->mem_deregister(ctx_, slots_mr_);
  for (auto* mr : send_mrs_)
    if (mr) tp_->mem_deregister(ctx_, mr);
  for (auto* b : send_blocks_) std::free(b);
  if (bye_mr_) tp_->mem_deregister(ctx_, bye_mr_);
  std::free(bye_);
  std::free(slots_);
}

Status P2pEngine::arm() {
  for (int k = 0; k < 2; ++k)
    for (int p = 0; p < size_; ++p)
      if (eps_[k][size_t(p)]) ep_peer_[eps_[k][size_t(p)]] = p;
  const size_t bytes = size_t(size_) * kSlots * kSlotBytes;
  // Untouched pages of the block cost no memory until a message lands.
  slots_ = static_cast<std::byte*>(std::aligned_alloc(4096, bytes));
  if (!slots_) return {CHORUS_ERR_SYSTEM, hooks_.who + ": out of memory for the p2p slots"};
  if (int rc = tp_->mem_register(ctx_, slots_, bytes, CHORUS_MEM_HOST, &slots_mr_); rc != CHORUS_OK)
    return {rc, hooks_.who + ": registering the p2p slots failed: " + tp_->last_error()};
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || peers_[size_t(p)].link != Link::kUp) continue;
    arm_peer(p);
    if (hooks_.connected && !peers_[size_t(p)].broken) hooks_.connected();
  }
  return Status::ok();
}

void P2pEngine::arm_peer(int p) {
  for (int k = 0; k < kSlots; ++k) {
    std::byte* slot = slots_ + (size_t(p) * kSlots + size_t(k)) * kSlotBytes;
    if (int rc = tp_->post_recv(eps_[0][size_t(p)], slot, kSlotBytes, slots_mr_,
                                wr(kLaneCtrlRecv, uint64_t(k)));
        rc != CHORUS_OK) {
      // A pair the transport cannot link (a device matrix with no entry
      // for it, as a ring-only one) has no point-to-point; the job does,
      // and a send or receive with that peer fails naming the reason.
      const std::string why = tp_->last_error();
      if (hooks_.log)
        hooks_.log(rc == CHORUS_ERR_INVALID_ARGUMENT ? CHORUS_LOG_DEBUG : CHORUS_LOG_WARN,
                   "no point-to-point with rank " + std::to_string(p) + ": " + why);
      break_peer(p, Status(rc, "no point-to-point with rank " + std::to_string(p) + ": " + why));
      break;
    }
    ++peers_[size_t(p)].slots_out;
  }
}

bool P2pEngine::accepts(const P2pOp& r, int peer, int tag) {
  if (r.peer >= 0 && r.peer != peer) return false;
  if (r.ordered) return tag == kOrderedTag;
  return r.tag == CHORUS_ANY_TAG ? tag >= 0 : tag == r.tag;
}

std::string P2pEngine::op_name(const P2pOp& op) const {
  if (op.ordered)
    return hooks_.who + ": " + (op.is_send ? "send to rank " : "recv from rank ") +
           std::to_string(op.peer) + " (" + std::to_string(op.bytes) + " bytes)";
  if (op.is_send)
    return hooks_.who + ": send_tagged to rank " + std::to_string(op.peer) + " (" +
           tag_text(op.tag) + ", " + std::to_string(op.bytes) + " bytes)";
  return hooks_.who + ": recv_tagged from " +
         (op.peer < 0 ? std::string("any rank") : "rank " + std::to_string(op.peer)) + " (" +
         tag_text(op.tag) + ")";
}

int P2pEngine::send_buffer() {
  if (free_bufs_.empty()) {
    auto* block = static_cast<std::byte*>(std::aligned_alloc(4096, kSendBlock * kSlotBytes));
    if (!block) return -1;
    chorus_tp_mr_t* mr = nullptr;
    if (tp_->mem_register(ctx_, block, kSendBlock * kSlotBytes, CHORUS_MEM_HOST, &mr) !=
        CHORUS_OK) {
      std::free(block);
      return -1;
    }
    send_blocks_.push_back(block);
    send_mrs_.push_back(mr);
    for (int i = 0; i < kSendBlock; ++i) {
      free_bufs_.push_back(int(send_bufs_.size()));
      send_bufs_.push_back(block + size_t(i) * kSlotBytes);
    }
  }
  int b = free_bufs_.back();
  free_bufs_.pop_back();
  return b;
}

Status P2pEngine::register_user(P2pOp& op) {
  if (op.bytes == 0 || !(caps_.flags & CHORUS_TP_CAP_NEEDS_REGISTRATION)) return Status::ok();
  if (int rc = tp_->mem_register(ctx_, op.buf, size_t(op.bytes), CHORUS_MEM_HOST, &op.mr);
      rc != CHORUS_OK)
    return {rc, op_name(op) + ": registering the buffer failed: " + tp_->last_error()};
  return Status::ok();
}

bool P2pEngine::try_post(int peer, const Post& p) {
  chorus_tp_endpoint_t* ep = eps_[p.lane == 0 ? 0 : 1][size_t(peer)];
  int rc = p.lane == 2 ? tp_->post_recv(ep, p.buf, p.len, p.mr, p.wr_id)
                       : tp_->post_send(ep, p.buf, p.len, p.mr, p.wr_id);
  if (rc == CHORUS_ERR_AGAIN) return false;
  if (rc != CHORUS_OK) {
    Status why(rc, hooks_.who + ": posting to rank " + std::to_string(peer) +
                       " failed: " + tp_->last_error());
    if (rc == CHORUS_ERR_PEER_LOST)
      lose(peer, why);
    else
      break_peer(peer, why);
  }
  return true;
}

void P2pEngine::flush(int peer) {
  Peer& pr = peers_[size_t(peer)];
  if (pr.link != Link::kUp) return;  // posted once the pair is connected
  while (!pr.broken && !pr.waiting.empty() && try_post(peer, pr.waiting.front()))
    if (!pr.broken) pr.waiting.pop_front();
}

void P2pEngine::post(int peer, Post p) {
  Peer& pr = peers_[size_t(peer)];
  if (pr.broken || pr.dying) {
    if (p.lane == 0 && (p.wr_id & 0xffffffff) != kByeIndex)
      free_bufs_.push_back(int(p.wr_id & 0xffffffff));
    return;
  }
  if (pr.link != Link::kUp) {
    // Queued until the pair is connected; this use starts the connection.
    pr.waiting.push_back(p);
    begin_connect(peer);
    return;
  }
  if (pr.waiting.empty() && try_post(peer, p)) return;
  pr.waiting.push_back(p);
}

int P2pEngine::send_ctrl(int peer, const Header& h, const void* payload, size_t len,
                         std::shared_ptr<P2pOp> op) {
  const int b = send_buffer();
  if (b < 0) {
    break_peer(peer, Status(CHORUS_ERR_SYSTEM, hooks_.who + ": no memory for a p2p send buffer"));
    return 0;
  }
  std::memcpy(send_bufs_[size_t(b)], &h, sizeof(h));
  if (int err = mem_.read(send_bufs_[size_t(b)] + sizeof(h), payload, len)) {
    free_bufs_.push_back(b);
    return err;
  }
  uint64_t id = wr(kLaneCtrlSend, uint64_t(b));
  if (op) {
    id |= kCarriesOp;
    peers_[size_t(peer)].eager_out.push_back(std::move(op));
  }
  post(peer,
       Post{0, send_bufs_[size_t(b)], sizeof(h) + len, send_mrs_[size_t(b) / kSendBlock], id});
  return 0;
}

void P2pEngine::start(std::shared_ptr<P2pOp> op) {
  ++live_;
  const int peer = op->peer;
  // A receive from a broken peer may still take a message that arrived.
  const bool has_message =
      !op->is_send && std::any_of(unexpected_.begin(), unexpected_.end(), [&](const Unexpected& u) {
        return accepts(*op, u.peer, u.h.tag);
      });
  if (peer >= 0 && (peers_[size_t(peer)].broken || (op->is_send && peers_[size_t(peer)].dying)) &&
      !has_message) {
    const Status& was = peers_[size_t(peer)].broken ? peers_[size_t(peer)].broken_status
                                                    : peers_[size_t(peer)].dying_status;
    complete(*op, Status(was.code(), op_name(*op) + ": the point-to-point connection with rank " +
                                         std::to_string(peer) + " failed earlier (" +
                                         was.message() + ")"));
    return;
  }
  if (op->is_send) {
    Peer& pr = peers_[size_t(peer)];
    op->seq = pr.next_seq++;
    Header h{kMagic, kEager, op->ordered ? kOrderedTag : op->tag, op->dtype, 0, op->bytes, op->seq};
    // An eager send copies the buffer; a larger one checks it can be read.
    const int err = op->bytes <= kEagerBytes ? send_ctrl(peer, h, op->buf, size_t(op->bytes), op)
                                             : mem_.readable(op->buf, size_t(op->bytes));
    if (err) {
      complete(*op,
               Status(CHORUS_ERR_SYSTEM,
                      op_name(*op) + ": " +
                          UserMemory::describe("send", op->buf, size_t(op->bytes), err, false) +
                          "; a local error, nothing was sent"));
      return;
    }
    if (op->bytes <= kEagerBytes) return;
    if (auto st = register_user(*op); !st.is_ok()) {
      complete(*op, st);
      return;
    }
    h.kind = kRts;
    op->rendezvous = true;
    pr.awaiting_cts[op->seq] = op;
    send_ctrl(peer, h, nullptr, 0, nullptr);
    return;
  }
  // A receive: the oldest unexpected message it accepts, else it waits.
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it) {
    if (!accepts(*op, it->peer, it->h.tag)) continue;
    Unexpected u = std::move(*it);
    unexpected_.erase(it);
    delivering_ = u.order;
    deliver(op, u.peer, u.h, u.payload.data());
    return;
  }
  posted_.push_back(std::move(op));
  // A receive from one rank connects that pair (the sender may be waiting
  // to be asked); an any-source receive waits for connect requests instead.
  if (peer >= 0) begin_connect(peer);
}

std::string P2pEngine::refusal(const P2pOp& op, int peer, const Header& h) const {
  if (op.ordered)  // sizes in bytes, as the call signatures compare them
    return h.bytes == op.bytes ? std::string() : std::string("size");
  const std::string sent = "rank " + std::to_string(peer) + " sent " + std::to_string(h.bytes) +
                           " bytes of " + chorus_dtype_name(h.dtype) + " with tag " +
                           std::to_string(h.tag);
  if (h.dtype != op.dtype)
    return sent + " but the matching receive takes " + chorus_dtype_name(op.dtype) +
           "; sender and receiver must use the same dtype";
  if (h.bytes > op.bytes)
    return sent + " but the matching receive has room for " + std::to_string(op.bytes) +
           " bytes; make the receive at least as large as the message";
  return {};
}

void P2pEngine::deliver(std::shared_ptr<P2pOp> op, int peer, const Header& h,
                        const std::byte* payload) {
  op->src = peer;
  op->src_tag = h.tag;
  op->got = h.bytes;
  if (std::string why = refusal(*op, peer, h); !why.empty()) {
    if (h.kind == kRts) {
      Header n{kMagic, kNack, op->tag, op->dtype, 0, op->bytes, h.seq};
      send_ctrl(peer, n, nullptr, 0, nullptr);
    }
    complete(*op, op->ordered ? hooks_.mismatch(*op, peer, h.bytes)
                              : Status(CHORUS_ERR_MISMATCH, op_name(*op) + ": " + why));
    return;
  }
  // A receive buffer that is not writable fails this receive alone; the
  // message stays first in line for the next receive that accepts it.
  const int bad = h.kind == kEager ? mem_.write(op->buf, payload, size_t(h.bytes))
                                   : mem_.writable(op->buf, size_t(h.bytes));
  if (bad) {
    Unexpected u{peer, h, {}, delivering_};
    if (h.kind == kEager) u.payload.assign(payload, payload + h.bytes);
    auto at = std::find_if(unexpected_.begin(), unexpected_.end(),
                           [&](const Unexpected& x) { return x.order > u.order; });
    unexpected_.insert(at, std::move(u));
    complete(*op, Status(CHORUS_ERR_INVALID_ARGUMENT,
                         op_name(*op) + ": " +
                             UserMemory::describe("receive", op->buf, size_t(h.bytes), bad, true)));
    return;
  }
  if (h.kind == kEager) {
    complete(*op, Status::ok());
    return;
  }
  // Rendezvous: the data's receive first, then the clear-to-send.
  if (auto st = register_user(*op); !st.is_ok()) {
    complete(*op, st);
    return;
  }
  op->chunks = size_t((h.bytes + max_msg_ - 1) / max_msg_);
  Peer& pr = peers_[size_t(peer)];
  pr.bulk_in.push_back(op);
  for (size_t i = 0; i < op->chunks; ++i) {
    const size_t off = i * max_msg_;
    post(peer, Post{2, op->buf + off, size_t(std::min<uint64_t>(max_msg_, h.bytes - off)), op->mr,
                    wr(kLaneBulkRecv, i)});
  }
  Header c{kMagic, kCts, h.tag, h.dtype, 0, h.bytes, h.seq};
  send_ctrl(peer, c, nullptr, 0, nullptr);
}

void P2pEngine::arrived(int peer, const Header& h, const std::byte* payload) {
  Peer& pr = peers_[size_t(peer)];
  switch (h.kind) {
    case kEager:
    case kRts: {
      delivering_ = arrivals_++;
      for (auto it = posted_.begin(); it != posted_.end(); ++it) {
        if (!accepts(**it, peer, h.tag)) continue;
        auto op = std::move(*it);
        posted_.erase(it);
        deliver(std::move(op), peer, h, payload);
        return;
      }
      Unexpected u{peer, h, {}, delivering_};
      if (h.kind == kEager) u.payload.assign(payload, payload + h.bytes);
      unexpected_.push_back(std::move(u));
      return;
    }
    case kCts: {
      auto it = pr.awaiting_cts.find(h.seq);
      if (it == pr.awaiting_cts.end()) {
        break_peer(peer,
                   Status(CHORUS_ERR_INTERNAL, hooks_.who + ": rank " + std::to_string(peer) +
                                                   " cleared a send this rank does not have"));
        return;
      }
      auto op = std::move(it->second);
      pr.awaiting_cts.erase(it);
      op->chunks = size_t((op->bytes + max_msg_ - 1) / max_msg_);
      pr.bulk_out.push_back(op);
      for (size_t i = 0; i < op->chunks; ++i) {
        const size_t off = i * max_msg_;
        post(peer, Post{1, op->buf + off, size_t(std::min<uint64_t>(max_msg_, op->bytes - off)),
                        op->mr, wr(kLaneBulkSend, i)});
      }
      return;
    }
    case kBye:
      // Its slot stays empty: the peer is leaving.
      ++pr.byes;
      pr.finalized = true;
      return;
    case kNack: {
      auto it = pr.awaiting_cts.find(h.seq);
      if (it == pr.awaiting_cts.end()) return;
      auto op = std::move(it->second);
      pr.awaiting_cts.erase(it);
      if (op->ordered) {
        complete(*op, hooks_.mismatch(*op, peer, h.bytes));
        return;
      }
      complete(*op,
               Status(CHORUS_ERR_MISMATCH,
                      op_name(*op) + ": the matching receive on rank " + std::to_string(peer) +
                          " (tag " + std::to_string(h.tag) + ") takes " + std::to_string(h.bytes) +
                          " bytes of " + chorus_dtype_name(h.dtype) + ", not " +
                          std::to_string(op->bytes) + " bytes of " + chorus_dtype_name(op->dtype)));
      return;
    }
    default:
      break_peer(peer,
                 Status(CHORUS_ERR_INTERNAL,
                        hooks_.who + ": malformed p2p message from rank " + std::to_string(peer)));
  }
}

void P2pEngine::on_completion(const chorus_tp_completion_t& c) {
  auto it = ep_peer_.find(c.endpoint);
  if (it == ep_peer_.end() || it->second < 0) return;  // a closed endpoint's: nothing waits
  const int peer = it->second;
  if (c.opcode == CHORUS_TP_OP_CONNECT_REQUEST) {
    // The peer wants this pair (it sends, or answers): connect it, so that
    // an any-source receive or an unexpected message can come from it.
    if (!closing_) begin_connect(peer);
    return;
  }
  handle_completion(peer, c);
  // The completion made room on the peer's endpoints: post what waited for
  // it now. This runs wherever completions are polled, inside a collective
  // or an untagged call too, while progress() runs only between calls; a
  // peer blocked in the receive of a waiting message would otherwise wait
  // until this rank's call ended, which may need that very peer.
  flush(peer);
}

void P2pEngine::handle_completion(int peer, const chorus_tp_completion_t& c) {
  Peer& pr = peers_[size_t(peer)];
  switch (lane_of(c.wr_id)) {
    case kLaneCtrlRecv: {
      --pr.slots_out;
      const size_t k = size_t(c.wr_id & 0xff);
      std::byte* slot = slots_ + (size_t(peer) * kSlots + k) * kSlotBytes;
      Header h{};
      if (c.byte_len < sizeof(h)) {
        break_peer(peer, Status(CHORUS_ERR_INTERNAL, hooks_.who + ": short p2p message from rank " +
                                                         std::to_string(peer)));
        return;
      }
      std::memcpy(&h, slot, sizeof(h));
      if (h.magic != kMagic || (h.kind == kEager && h.bytes != c.byte_len - sizeof(h))) {
        break_peer(
            peer, Status(CHORUS_ERR_INTERNAL,
                         hooks_.who + ": malformed p2p message from rank " + std::to_string(peer)));
        return;
      }
      arrived(peer, h, slot + sizeof(h));
      if (pr.broken || h.kind == kBye) return;
      if (!pr.dying &&
          tp_->post_recv(eps_[0][size_t(peer)], slot, kSlotBytes, slots_mr_, c.wr_id) == CHORUS_OK)
        ++pr.slots_out;
      else
        lose(peer, Status(CHORUS_ERR_PEER_LOST,
                          hooks_.who + ": the point-to-point connection with rank " +
                              std::to_string(peer) + " ended: " + tp_->last_error()));
      return;
    }
    case kLaneCtrlSend: {
      if ((c.wr_id & 0xffffffff) == kByeIndex) return;
      free_bufs_.push_back(int(c.wr_id & 0xffffffff));
      if ((c.wr_id & kCarriesOp) && !pr.eager_out.empty()) {
        auto op = std::move(pr.eager_out.front());
        pr.eager_out.pop_front();
        complete(*op, Status::ok());
      }
      return;
    }
    case kLaneBulkSend:
    case kLaneBulkRecv: {
      auto& q = lane_of(c.wr_id) == kLaneBulkSend ? pr.bulk_out : pr.bulk_in;
      if (q.empty()) return;
      P2pOp& op = *q.front();
      if (++op.chunks_done == op.chunks) {
        auto done = std::move(q.front());
        q.pop_front();
        complete(*done, Status::ok());
      }
      return;
    }
    default:
      return;
  }
}

void P2pEngine::complete(P2pOp& op, Status st) {
  if (op.mr) {
    tp_->mem_deregister(ctx_, op.mr);
    op.mr = nullptr;
  }
  --live_;
  hooks_.finish(op, std::move(st));
}

}  // namespace chorus::core
