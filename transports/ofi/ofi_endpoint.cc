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

/// endpoint_close waits this long, at most, for cancelled receives to come back.
constexpr std::chrono::milliseconds kCloseLinger{1000};
/// After a bye, the messages it says were sent before it must land within this.
constexpr std::chrono::seconds kByeGrace{5};
/// The dialling side of endpoint_connect repeats an unanswered hello this often.
constexpr std::chrono::milliseconds kHelloRepeat{500};

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

// ---- connection setup ---------------------------------------------------------

void Endpoint::connect(const void* peer_blob, std::size_t length, int timeout_ms) {
  if (closing_)
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_connect: the endpoint is closed");
  if (connected_) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "endpoint_connect: the endpoint to " + who() + " is already connected");
  }
  const auto blob = wire::decode_blob(peer_blob, length);
  if (!blob) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "endpoint_connect: the " + std::to_string(length) + "-byte blob for " + who() +
                    " is not an ofi transport address (another transport's, or corrupted)");
  }
  if (blob->provider != ctx_.fingerprint()) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "endpoint_connect: rank " + std::to_string(blob->rank) +
                    " uses a different libfabric provider or address format than this "
                    "context's " +
                    ctx_.provider() + "; give every rank the same transport.ofi.provider");
  }
  if (blob->rank != peer_rank_ || blob->peer_rank != ctx_.rank() || blob->channel != channel_) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "endpoint_connect: the blob belongs to rank " + std::to_string(blob->rank) +
                    "'s endpoint for " +
                    endpoint_name(blob->peer_rank, blob->channel, ctx_.data_channels()) +
                    ", but this is rank " + std::to_string(ctx_.rank()) + "'s endpoint for " +
                    who());
  }
  const Deadline deadline = Deadline::after_ms(timeout_ms);
  ctx_.watch(*blob, deadline);
  if (hello_key_ != 0 && hello_key_ != blob->key) hello_key_ = 0;  // from an older endpoint
  peer_key_ = blob->key;
  peer_name_.assign(blob->name_bytes().begin(), blob->name_bytes().end());
  peer_in_process_ = ctx_.same_process(*blob);
  if (peer_in_process_) {
    std::lock_guard lock(local_endpoints::mutex());
    if (!local_endpoints::open(peer_name_)) {
      throw Error(CHORUS_ERR_PEER_LOST,
                  "the endpoint of " + who() + " (in this process) is already closed");
    }
  }
  peer_addr_ = ctx_.address_of(blob->name_bytes());
  if (ctx_.uses_doorbell()) {
    peer_bell_ = Doorbell::of(blob->pid, blob->context_token);
    ring_peer_ = true;
  }
  // Only the higher rank says hello; the lower rank answers it with an ack
  // whenever its context progresses (in any call, even while it connects
  // other endpoints), so neither side needs the other to be inside
  // endpoint_connect at the same moment, and the two providers' endpoints
  // never dial each other at once (tcp;ofi_rxm can lose the messages of a
  // simultaneous connection). The hello is repeated while unanswered.
  const bool dialer = ctx_.rank() > peer_rank_;
  auto next_hello = Deadline::Clock::now();
  ctx_.reset_backoff();
  for (;;) {
    if (dialer && Deadline::Clock::now() >= next_hello) {
      // A hello still queued behind -FI_EAGAIN (the connection is being set
      // up) is not repeated.
      if (!control_queued(wire::ControlType::kHello))
        send_control(wire::ControlType::kHello, peer_addr_, peer_key_, 0);
      next_hello = Deadline::Clock::now() + kHelloRepeat;
    }
    ctx_.progress();
    // The lower rank returns once its ack is with the provider, not merely
    // queued behind -FI_EAGAIN: verbs;ofi_rxm can deliver the hello over a
    // connection it accepted and still refuse sends on it for a while (it
    // handles connection events at most every 10 ms of progress calls). A
    // caller that stops progressing this context once connect returns (a
    // thread joining the peer's connect, say) would strand the ack, and the
    // peer's connect would time out.
    if (dialer ? acked_ : hello_key_ == peer_key_ && !control_queued(wire::ControlType::kAck))
      break;
    std::string why;
    if (bye_seen_) {
      throw Error(CHORUS_ERR_PEER_LOST, who() + " closed its endpoint before connecting");
    }
    if (ctx_.rank_dead(peer_rank_, &why)) throw Error(CHORUS_ERR_PEER_LOST, why);
    if (!control_error_.empty()) {
      throw Error(CHORUS_ERR_PEER_LOST, "reaching " + who() + ": " + control_error_);
    }
    if (deadline.expired()) {
      throw Error(CHORUS_ERR_TIMEOUT,
                  who() + " did not answer within " + std::to_string(timeout_ms) + " ms over " +
                      ctx_.provider() +
                      (dialer ? ": its endpoint is gone, or its context is not progressing"
                              : ": its endpoint is gone, or it has not called endpoint_connect"));
    }
    const auto wake = dialer ? std::min(deadline.at(), next_hello) : deadline.at();
    ctx_.sleep(Deadline::at(wake));
  }
  connected_ = true;
  log(CHORUS_LOG_DEBUG, "rank " + std::to_string(ctx_.rank()) + " connected to " + who());
}

// ---- control messages -------------------------------------------------------------

bool Endpoint::control_queued(wire::ControlType type) const {
  return std::any_of(control_tx_.begin(), control_tx_.end(), [type](const ControlSlot& s) {
    return s.state == ControlSlot::State::kQueued && s.type == type;
  });
}

void Endpoint::post_control_recv(ControlRecv& r) {
  if (ep_ == nullptr || r.posted || closing_) return;
  void* desc = control_rx_mr_ != nullptr ? fi_mr_desc(control_rx_mr_) : nullptr;
  const ssize_t rc = fi_trecv(ep_, r.buf.data(), r.buf.size(), desc, FI_ADDR_UNSPEC,
                              wire::control_tag(key_), 0, &r.hdr.fi);
  if (rc == 0) {
    r.posted = true;
  } else if (rc != -FI_EAGAIN) {
    log(CHORUS_LOG_WARN, ctx_.provider() + ": " + fi_error_text("fi_trecv(control)", rc));
  }
}

void Endpoint::send_control(wire::ControlType type, fi_addr_t to, std::uint32_t to_key,
                            std::uint64_t count) {
  auto it = std::find_if(control_tx_.begin(), control_tx_.end(),
                         [](const ControlSlot& s) { return s.state == ControlSlot::State::kFree; });
  if (it == control_tx_.end() || ep_ == nullptr) {
    log(CHORUS_LOG_DEBUG, "control message to " + who() + " dropped: no free slot");
    return;
  }
  const std::span<const std::byte> my_name =
      type == wire::ControlType::kHello ? ctx_.name() : std::span<const std::byte>{};
  it->length = wire::encode(type, key_, count, my_name, it->buf.data());
  it->to = to;
  it->to_key = to_key;
  it->type = type;
  it->seq = control_seq_++;
  it->state = ControlSlot::State::kQueued;
  push_control();
}

void Endpoint::push_control() {
  if (ep_ == nullptr) return;
  for (;;) {
    ControlSlot* next = nullptr;
    for (ControlSlot& s : control_tx_) {
      if (s.state == ControlSlot::State::kQueued && (next == nullptr || s.seq < next->seq))
        next = &s;
    }
    if (next == nullptr) return;
    const std::uint64_t tag = wire::control_tag(next->to_key);
    std::unique_lock<std::mutex> lock;
    if (peer_in_process_ && next->to == peer_addr_) {
      lock = std::unique_lock(local_endpoints::mutex());
      if (!local_endpoints::open(peer_name_)) {
        next->state = ControlSlot::State::kFree;
        control_error_ = "its endpoint (in this process) is closed";
        continue;
      }
    }
    ssize_t rc;
    if (next->length <= ctx_.inject_size()) {
      rc = fi_tinject(ep_, next->buf.data(), next->length, next->to, tag);
      if (rc == 0) next->state = ControlSlot::State::kFree;
    } else {
      void* desc = control_tx_mr_ != nullptr ? fi_mr_desc(control_tx_mr_) : nullptr;
      rc = fi_tsend(ep_, next->buf.data(), next->length, desc, next->to, tag, &next->hdr.fi);
      if (rc == 0) next->state = ControlSlot::State::kPosted;
    }
    if (rc == -FI_EAGAIN) return;  // the context's progress() retries
    if (rc == 0 && next->to == peer_addr_) ring();
    if (rc != 0) {
      next->state = ControlSlot::State::kFree;
      control_error_ = ctx_.provider() + ": " + fi_error_text("fi_tsend(control)", rc);
      log(CHORUS_LOG_DEBUG, "control message to " + who() + ": " + control_error_);
    }
  }
}

void Endpoint::on_control(const std::byte* data, std::size_t length) {
  const auto c = wire::decode_control(data, length);
  if (!c) {
    log(CHORUS_LOG_WARN, "dropped a malformed control message on the endpoint to " + who());
    return;
  }
  switch (c->type) {
    case wire::ControlType::kHello: {
      if (peer_key_ != 0 && c->sender_key != peer_key_) {
        log(CHORUS_LOG_DEBUG, "ignored a hello from a stale endpoint of " + who());
        return;
      }
      hello_key_ = c->sender_key;
      fi_addr_t to = peer_addr_;
      if (to == FI_ADDR_UNSPEC) {
        // Its blob has not reached us yet: answer to the name in the hello.
        if (c->name_len == 0) return;
        try {
          to = ctx_.address_of({c->name, c->name_len});
        } catch (const Error& e) {
          log(CHORUS_LOG_DEBUG,
              std::string("cannot answer a hello from ") + who() + ": " + e.what());
          return;
        }
        hello_addr_ = to;
      }
      send_control(wire::ControlType::kAck, to, c->sender_key, 0);
      return;
    }
    case wire::ControlType::kAck:
      if (peer_key_ != 0 && c->sender_key == peer_key_) acked_ = true;
      return;
    case wire::ControlType::kBye: {
      const std::uint32_t expected = peer_key_ != 0 ? peer_key_ : hello_key_;
      if (expected != 0 && c->sender_key != expected) return;
      if (!bye_seen_) peer_closed(c->count);
      return;
    }
  }
}

void Endpoint::peer_closed(std::uint64_t count) {
  bye_seen_ = true;
  const std::string why = who() + " closed its endpoint";
  fail_tx(CHORUS_ERR_PEER_LOST, why);
  rx_limit_ = count;
  fail_rx(count, CHORUS_ERR_PEER_LOST,
          why + " after sending " + std::to_string(count) + " messages");
  if (rx_.head < std::min(rx_.tail, count) && doom_ == Deadline::Clock::time_point::max()) {
    doom_ = Deadline::Clock::now() + kByeGrace;
    doom_status_ = CHORUS_ERR_PEER_LOST;
    doom_error_ = why + "; messages it sent before did not arrive within 5 s";
    ctx_.note_deadline(doom_);
  }
  log(CHORUS_LOG_DEBUG, why + " after " + std::to_string(count) + " messages");
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
  return doom_;
}

// ---- closing ------------------------------------------------------------------

bool Endpoint::quiescent() const {
  if (ep_ == nullptr) return true;
  for (std::uint64_t i = rx_.head; i < rx_.tail; ++i) {
    if (const_cast<Queue&>(rx_).at(i).with_provider) return false;
  }
  for (const ControlRecv& r : control_rx_)
    if (r.posted) return false;
  for (const ControlSlot& s : control_tx_)
    if (s.state != ControlSlot::State::kFree) return false;
  return true;
}

void Endpoint::shut_down(bool drain) {
  if (closing_) return;
  // Tell the peer how many messages it will get, so its later receives fail
  // at once instead of waiting for its deadline.
  if (ep_ != nullptr && !bye_seen_ && !ctx_.rank_dead(peer_rank_, nullptr)) {
    if (connected_) {
      send_control(wire::ControlType::kBye, peer_addr_, peer_key_, tx_submitted_);
    } else if (hello_addr_ != FI_ADDR_UNSPEC) {
      send_control(wire::ControlType::kBye, hello_addr_, hello_key_, tx_submitted_);
    }
  }
  closing_ = true;
  for (std::uint64_t i = tx_.posted; i < tx_.tail; ++i) {
    Wr& w = tx_.at(i);
    if (w.state == Wr::State::kQueued) w.state = Wr::State::kFailed;
  }
  tx_.posted = tx_.tail;
  for (std::uint64_t i = rx_.head; i < rx_.tail; ++i) {
    Wr& w = rx_.at(i);
    if (w.with_provider && ep_ != nullptr) fi_cancel(&ep_->fid, &w.hdr.fi);
    if (w.state == Wr::State::kQueued || w.state == Wr::State::kPosted) {
      w.state = Wr::State::kFailed;
    }
  }
  rx_.posted = rx_.tail;
  for (ControlRecv& r : control_rx_) {
    if (r.posted && ep_ != nullptr) fi_cancel(&ep_->fid, &r.hdr.fi);
  }
  if (!drain) return;
  const Deadline until = Deadline::after_ms(static_cast<int>(kCloseLinger.count()));
  ctx_.reset_backoff();
  while (!quiescent() && !until.expired()) {
    if (ctx_.progress() == 0) ctx_.sleep(until);
  }
  if (!quiescent()) {
    // The fi endpoint is shared by the context's endpoints and stays open;
    // a receive the provider had already matched may still land.
    log(CHORUS_LOG_WARN, ctx_.provider() + " still holds receives of the closed endpoint to " +
                             who() + " after " + std::to_string(kCloseLinger.count()) +
                             " ms; they may still write into their buffers");
  }
}

}  // namespace chorus::ofi
