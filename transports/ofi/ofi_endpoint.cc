// Endpoint's data path (ofi_endpoint.h): construction, posting sends and
// receives (with the backlog behind -FI_EAGAIN), provider completions and
// errors, retiring each direction's ring in post order, and failing posts.
// Connection setup, control messages and closing are in
// ofi_endpoint_control.cc.
#include "ofi_endpoint.h"

#include <chorus/transport_names.hpp>
#include "ofi.h"
#include "ofi_context.h"
#include "ofi_error.h"
#include "ofi_local_endpoints.h"
#include "ofi_memory.h"

#include <rdma/fi_cm.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <sys/uio.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <mutex>

namespace chorus::ofi {

namespace {

/// Target of zero-length posts: some providers reject a NULL buffer.
std::byte g_empty[1];

int status_of(int code) {
  switch (code) {
    case FI_ETRUNC:
      return CHORUS_ERR_INVALID_ARGUMENT;
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ECONNABORTED:
    case FI_ENOTCONN:
    case FI_EHOSTUNREACH:
    case FI_ENETUNREACH:
    case FI_ENETDOWN:
    case FI_ETIMEDOUT:
    case EPIPE:  // what tcp;ofi_rxm reports for a dropped connection
    case FI_EHOSTDOWN:
    case FI_ESHUTDOWN:
    case FI_ECANCELED:
      return CHORUS_ERR_PEER_LOST;
    default:
      return CHORUS_ERR_SYSTEM;
  }
}

}  // namespace

Endpoint::Endpoint(Context& ctx, int peer_rank, int channel, std::uint32_t key)
    : EndpointBase(ctx, peer_rank, channel), key_(key) {
  tx_.ring.resize(kMaxOutstanding);
  rx_.ring.resize(kMaxOutstanding);
  for (std::uint32_t i = 0; i < kMaxOutstanding; ++i) {
    tx_.ring[i].hdr = OpHeader{{}, this, OpKind::kSend, i};
    rx_.ring[i].hdr = OpHeader{{}, this, OpKind::kRecv, i};
  }
  for (std::uint32_t i = 0; i < kControlSlots; ++i) {
    control_tx_[i].hdr = OpHeader{{}, this, OpKind::kControlSend, i};
    control_rx_[i].hdr = OpHeader{{}, this, OpKind::kControlRecv, i};
  }
}

Endpoint::~Endpoint() { detach(); }

std::string Endpoint::who() const {
  return endpoint_name(peer_rank_, channel_, ctx_.data_channels());
}

std::string Endpoint::op_text(OpKind kind) const {
  return (kind == OpKind::kRecv || kind == OpKind::kControlRecv ? "receive from " : "send to ") +
         who();
}

void Endpoint::ring() {
  // A peer that cannot be reached (another network namespace) falls back to
  // its own periodic checks; stop trying.
  if (ring_peer_ && !ctx_.ring(peer_bell_)) ring_peer_ = false;
}

void Endpoint::open() {
  ep_ = ctx_.fi_ep();
  if (ctx_.mr_policy().required) {
    control_tx_mr_ = register_region(ctx_, control_tx_.data(), sizeof control_tx_);
    control_rx_mr_ = register_region(ctx_, control_rx_.data(), sizeof control_rx_);
  }
  for (ControlRecv& r : control_rx_) post_control_recv(r);
}

void Endpoint::detach() {
  // The context closed its fi endpoint: nothing is with the provider any more.
  ep_ = nullptr;
  for (Queue* q : {&tx_, &rx_}) {
    for (Wr& w : q->ring) {
      if (w.temp_mr != nullptr) fi_close(&w.temp_mr->fid);
      w.temp_mr = nullptr;
      w.with_provider = false;
    }
  }
  for (fid_mr** mr : {&control_tx_mr_, &control_rx_mr_}) {
    if (*mr != nullptr) fi_close(&(*mr)->fid);
    *mr = nullptr;
  }
  for (ControlRecv& r : control_rx_) r.posted = false;
  for (ControlSlot& s : control_tx_) s.state = ControlSlot::State::kFree;
}

// ---- posting ----------------------------------------------------------------------

int Endpoint::post_send(const void* buf, std::size_t length, MemoryRegion* mr,
                        std::uint64_t wr_id) {
  return post(tx_, OpKind::kSend, static_cast<std::byte*>(const_cast<void*>(buf)), length, mr,
              wr_id);
}

int Endpoint::post_recv(void* buf, std::size_t length, MemoryRegion* mr, std::uint64_t wr_id) {
  return post(rx_, OpKind::kRecv, static_cast<std::byte*>(buf), length, mr, wr_id);
}

int Endpoint::post(Queue& q, OpKind kind, std::byte* buf, std::size_t length, MemoryRegion* mr,
                   std::uint64_t wr_id) {
  const bool send = kind == OpKind::kSend;
  const char* op = send ? "post_send" : "post_recv";
  if (closing_)
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                          std::string(op) + ": the endpoint is closed");
  if (!connected_) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                          std::string(op) + ": the endpoint to " + who() + " is not connected");
  }
  const int status = send ? tx_status_ : rx_status_;
  if (status != CHORUS_OK) {
    return set_last_error(status, std::string(op) + ": " + (send ? tx_error_ : rx_error_));
  }
  if (!send && rx_.tail >= rx_limit_) {
    return set_last_error(CHORUS_ERR_PEER_LOST, std::string(op) + ": " + who() +
                                                    " closed its endpoint after sending " +
                                                    std::to_string(rx_limit_) +
                                                    " messages; this receive can never match");
  }
  if (buf == nullptr && length > 0) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT, std::string(op) + ": NULL buffer");
  }
  if (length > ctx_.max_message_size()) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT, std::string(op) + ": " +
                                                           std::to_string(length) +
                                                           " bytes exceed max_message_size " +
                                                           std::to_string(ctx_.max_message_size()));
  }
  if (q.outstanding >= kMaxOutstanding || q.at(q.tail).state != Wr::State::kFree) {
    return set_last_error(CHORUS_ERR_AGAIN, std::string(op) + ": " +
                                                std::to_string(kMaxOutstanding) +
                                                " posts are outstanding on the endpoint to " +
                                                who() + "; poll completions first");
  }
  void* desc = nullptr;
  fid_mr* temp = nullptr;
  if (mr != nullptr) {
    if (!mr->covers(buf, length)) {
      return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                            std::string(op) + ": the buffer is not inside the registration");
    }
    desc = mr->desc();
  } else if (ctx_.mr_policy().required && length > 0) {
    // The ABI lets a caller post unregistered memory; the provider does not.
    temp = register_region(ctx_, buf, length);
    desc = fi_mr_desc(temp);
  }
  Wr& w = q.at(q.tail);
  w.buf = buf;
  w.length = length;
  w.wr_id = wr_id;
  w.desc = desc;
  w.temp_mr = temp;
  w.byte_len = 0;
  w.state = Wr::State::kQueued;
  w.with_provider = false;
  w.retired = false;
  w.status = CHORUS_OK;
  w.error.clear();
  ++q.tail;
  ++q.outstanding;
  push(q, kind, kPostRetries);
  return CHORUS_OK;
}

long Endpoint::submit(Wr& w, OpKind kind) {
  void* buf = w.buf != nullptr ? w.buf : g_empty;
  ssize_t rc;
  if (kind == OpKind::kSend) {
    std::unique_lock<std::mutex> lock;
    if (peer_in_process_) {
      lock = std::unique_lock(local_endpoints::mutex());
      if (!local_endpoints::open(peer_name_)) return -FI_ESHUTDOWN;
    }
    const std::uint64_t tag = wire::data_tag(peer_key_);
    if (w.length <= ctx_.inject_size()) {
      // Injected: the buffer is free on return, so the send is complete.
      rc = fi_tinject(ep_, buf, w.length, peer_addr_, tag);
      if (rc == 0) {
        w.state = Wr::State::kDone;
        w.byte_len = w.length;
        ++tx_submitted_;
      }
      return rc;
    }
    rc = fi_tsend(ep_, buf, w.length, w.desc, peer_addr_, tag, &w.hdr.fi);
    if (rc == 0) ++tx_submitted_;
  } else {
    // The spill behind the buffer catches a message longer than the receive
    // (up to the spill's size), so a short receive is told by its length
    // instead of a provider truncation (which tcp;ofi_rxm answers by
    // dropping the connection, and after which shm cannot say how long the
    // message was).
    const Spill spill = ctx_.spill();
    iovec iov[2] = {{buf, static_cast<std::size_t>(w.length)}, {spill.buf, spill.length}};
    void* desc[2] = {w.desc, spill.desc};
    const bool one = w.length == 0;
    rc = fi_trecvv(ep_, one ? iov + 1 : iov, one ? desc + 1 : desc, one ? 1 : 2, FI_ADDR_UNSPEC,
                   wire::data_tag(key_), 0, &w.hdr.fi);
  }
  if (rc == 0) {
    w.state = Wr::State::kPosted;
    w.with_provider = true;
  }
  return rc;
}

void Endpoint::push(Queue& q, OpKind kind, int retries) {
  const bool send = kind == OpKind::kSend;
  while (ep_ != nullptr && q.posted < q.tail) {
    Wr& w = q.at(q.posted);
    if (w.state != Wr::State::kQueued) {
      ++q.posted;
      continue;
    }
    const long rc = submit(w, kind);
    if (rc == 0) {
      ++q.posted;
      if (send) ring();
      continue;
    }
    // shm answers a full receive queue with -FI_ENOMEM rather than -FI_EAGAIN.
    if (rc == -FI_EAGAIN || (rc == -FI_ENOMEM && !send)) {
      // Let the provider make room (completions, connection setup), a few
      // times; then the post stays queued and progress() hands it over.
      if (retries-- > 0) {
        ctx_.read_provider_cq();
        continue;
      }
      break;
    }
    if (rc == -FI_ESHUTDOWN && send && peer_in_process_) {
      peer_dead("the endpoint of " + who() + " (in this process) was closed",
                std::chrono::milliseconds(100));
      break;
    }
    fail_both(CHORUS_ERR_SYSTEM, ctx_.provider() + ": " + op_text(kind) + ": " +
                                     fi_error_text(send ? "fi_tsend" : "fi_trecv", rc));
    break;
  }
  retire(q, send ? CHORUS_TP_SEND : CHORUS_TP_RECV);
}

bool Endpoint::has_backlog() const {
  if (ep_ == nullptr) return false;
  if (tx_.posted < tx_.tail || rx_.posted < rx_.tail) return true;
  for (const ControlSlot& s : control_tx_)
    if (s.state == ControlSlot::State::kQueued) return true;
  if (!closing_) {
    for (const ControlRecv& r : control_rx_)
      if (!r.posted) return true;
  }
  return false;
}

void Endpoint::push_backlog() {
  if (ep_ == nullptr) return;
  push_control();
  if (!closing_) {
    push(tx_, OpKind::kSend, 0);
    push(rx_, OpKind::kRecv, 0);
    for (ControlRecv& r : control_rx_) post_control_recv(r);
  }
}

// ---- completions ---------------------------------------------------------------

void Endpoint::release(Wr& w) {
  if (w.temp_mr != nullptr) fi_close(&w.temp_mr->fid);
  w.temp_mr = nullptr;
  w.state = Wr::State::kFree;
  w.with_provider = false;
  w.retired = false;
  w.error.clear();
}

void Endpoint::retire(Queue& q, std::uint32_t opcode) {
  while (q.head < q.tail) {
    Wr& w = q.at(q.head);
    if (w.state != Wr::State::kDone && w.state != Wr::State::kFailed) break;
    if (!closing_) {
      if (w.state == Wr::State::kDone) {
        ctx_.completions().push(handle(), opcode, w.wr_id, w.byte_len);
      } else {
        ctx_.completions().push_error(handle(), opcode, w.wr_id, w.status, peer_rank_, w.error);
      }
    }
    w.retired = true;
    if (!w.with_provider) release(w);
    ++q.head;
  }
  if (q.posted < q.head) q.posted = q.head;
}

void Endpoint::on_completion(const OpHeader& op, const fi_cq_data_entry& entry) {
  switch (op.kind) {
    case OpKind::kSend:
    case OpKind::kRecv: {
      const bool send = op.kind == OpKind::kSend;
      Queue& q = send ? tx_ : rx_;
      Wr& w = q.ring[op.slot];
      w.with_provider = false;
      if (w.temp_mr != nullptr) {
        fi_close(&w.temp_mr->fid);
        w.temp_mr = nullptr;
      }
      // A sender of more than an inject's worth waits for its completion,
      // which this receive's end produces in the sender's queue.
      if (!send && entry.len > ctx_.inject_size()) ring();
      if (w.state == Wr::State::kPosted) {
        w.state = Wr::State::kDone;
        w.byte_len = send ? w.length : entry.len;
        if (!send && entry.len > w.length) {
          // The message ran into the spill: a short receive. The stream is
          // intact, so the endpoint stays usable (as with the tcp transport).
          w.state = Wr::State::kFailed;
          w.status = CHORUS_ERR_INVALID_ARGUMENT;
          w.error = "message of " + std::to_string(entry.len) + " bytes arrived for a receive of " +
                    std::to_string(w.length) + " bytes from " + who() +
                    "; the message was discarded";
        }
      }
      if (w.retired) {
        release(w);
      } else {
        retire(q, send ? CHORUS_TP_SEND : CHORUS_TP_RECV);
      }
      return;
    }
    case OpKind::kControlRecv: {
      ControlRecv& r = control_rx_[op.slot];
      r.posted = false;
      if (!closing_) on_control(r.buf.data(), entry.len);
      post_control_recv(r);
      return;
    }
    case OpKind::kControlSend:
      control_tx_[op.slot].state = ControlSlot::State::kFree;
      push_control();
      return;
  }
}

void Endpoint::on_error(const OpHeader& op, const fi_cq_err_entry& err,
                        const std::string& provider_text) {
  const int code = std::abs(err.err);
  const std::string detail = std::string(fi_strerror(code)) +
                             (provider_text.empty() ? "" : " (provider: " + provider_text + ")");
  switch (op.kind) {
    case OpKind::kSend:
    case OpKind::kRecv: {
      const bool send = op.kind == OpKind::kSend;
      Queue& q = send ? tx_ : rx_;
      Wr& w = q.ring[op.slot];
      w.with_provider = false;
      if (w.temp_mr != nullptr) {
        fi_close(&w.temp_mr->fid);
        w.temp_mr = nullptr;
      }
      if (w.state != Wr::State::kPosted) {
        // Failed already (the cancel of a receive we gave up on), or closing.
        if (w.retired) release(w);
        return;
      }
      if (!send && code == FI_ETRUNC) {
        // Longer than the receive and the spill together. Providers cannot
        // resume a stream after a truncation (tcp;ofi_rxm drops the
        // connection), so the endpoint closes, whatever the provider.
        const std::string what =
            "message of more than " + std::to_string(w.length + ctx_.spill_size()) +
            " bytes arrived for a receive of " + std::to_string(w.length) + " bytes from " + who() +
            "; the endpoint is closed [" + ctx_.provider() + ": " + detail + "]";
        w.state = Wr::State::kFailed;
        w.status = CHORUS_ERR_INVALID_ARGUMENT;
        w.error = what;
        if (!bye_seen_ && connected_)
          send_control(wire::ControlType::kBye, peer_addr_, peer_key_, tx_submitted_);
        fail_both(CHORUS_ERR_PEER_LOST,
                  "the endpoint to " + who() + " was closed after a short receive: " + what);
        return;
      }
      const std::string what = ctx_.provider() + ": " + op_text(op.kind) + " failed: " + detail;
      w.state = Wr::State::kFailed;
      w.status = status_of(code);
      w.error = what;
      log(CHORUS_LOG_WARN, what);
      fail_both(CHORUS_ERR_PEER_LOST,
                "the endpoint to " + who() + " failed after an earlier error: " + what);
      return;
    }
    case OpKind::kControlRecv: {
      ControlRecv& r = control_rx_[op.slot];
      r.posted = false;
      if (code != FI_ECANCELED) {
        log(CHORUS_LOG_DEBUG, "control receive from " + who() + " failed: " + detail);
      }
      post_control_recv(r);
      return;
    }
    case OpKind::kControlSend: {
      ControlSlot& s = control_tx_[op.slot];
      s.state = ControlSlot::State::kFree;
      if (code != FI_ECANCELED) {
        control_error_ = ctx_.provider() + ": " + detail;
        log(CHORUS_LOG_DEBUG, "control message to " + who() + " failed: " + detail);
      }
      push_control();
      return;
    }
  }
}

void Endpoint::on_reaped(std::uint32_t opcode) {
  if (opcode == CHORUS_TP_OP_CONNECT_REQUEST) return;  // holds no slot
  Queue& q = opcode == CHORUS_TP_SEND ? tx_ : rx_;
  if (q.outstanding > 0) --q.outstanding;
}

// ---- failure -------------------------------------------------------------------

void Endpoint::fail_queue(Queue& q, OpKind kind, std::uint64_t from, int status,
                          const std::string& why) {
  for (std::uint64_t i = std::max(q.head, from); i < q.tail; ++i) {
    Wr& w = q.at(i);
    if (w.state != Wr::State::kQueued && w.state != Wr::State::kPosted) continue;
    // A receive the provider still holds is cancelled, so nothing lands in
    // its buffer once it has been reported failed. Sends cannot be
    // cancelled on most providers; they complete (or not) into nothing.
    if (w.state == Wr::State::kPosted && kind == OpKind::kRecv && ep_ != nullptr) {
      fi_cancel(&ep_->fid, &w.hdr.fi);
    }
    w.state = Wr::State::kFailed;
    w.status = status;
    w.error = why;
  }
}

void Endpoint::fail_tx(int status, const std::string& why) {
  if (tx_status_ == CHORUS_OK) {
    tx_status_ = status;
    tx_error_ = why;
  }
  fail_queue(tx_, OpKind::kSend, 0, status, why);
  retire(tx_, CHORUS_TP_SEND);
}

void Endpoint::fail_rx(std::uint64_t from, int status, const std::string& why) {
  if (from == 0 && rx_status_ == CHORUS_OK) {
    rx_status_ = status;
    rx_error_ = why;
  }
  fail_queue(rx_, OpKind::kRecv, from, status, why);
  retire(rx_, CHORUS_TP_RECV);
}

void Endpoint::fail_both(int status, const std::string& why) {
  fail_tx(status, why);
  fail_rx(0, status, why);
}

void Endpoint::fail(int status, const std::string& why) { fail_both(status, why); }

void Endpoint::peer_dead(const std::string& why, std::chrono::milliseconds grace) {
  fail_tx(CHORUS_ERR_PEER_LOST, why);
  if (rx_status_ == CHORUS_OK) {
    rx_status_ = CHORUS_ERR_PEER_LOST;
    rx_error_ = why;
  }
  // Messages it sent before it died may still be on their way through the
  // provider (queued in our shm region, or in the socket): let them land.
  if (rx_.head < rx_.tail) {
    doom_ = std::min(doom_, Deadline::Clock::now() + grace);
    doom_status_ = CHORUS_ERR_PEER_LOST;
    doom_error_ = why;
    ctx_.note_deadline(doom_);
  }
}

Deadline::Clock::time_point Endpoint::check_deadline(Deadline::Clock::time_point now) {
  if (doom_ <= now) {
    doom_ = Deadline::Clock::time_point::max();
    fail_tx(doom_status_, doom_error_);
    fail_rx(0, doom_status_, doom_error_);
  }
  send_opener();
  return std::min(doom_, next_opener_);
}

}  // namespace chorus::ofi
