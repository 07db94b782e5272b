// Endpoint's connection (ofi_endpoint.h): endpoint_connect's hello/ack
// handshake, blocking or polled (with the call-me and the connect request),
// the control messages (hello, ack, bye, call-me) and their slots, the
// peer's bye, and endpoint_close's shut-down. The data path is in
// ofi_endpoint.cc.
#include "ofi_endpoint.h"

#include <chorus/transport_names.hpp>
#include "ofi.h"
#include "ofi_context.h"
#include "ofi_error.h"
#include "ofi_local_endpoints.h"

#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <mutex>

namespace chorus::ofi {

namespace {

/// endpoint_close waits this long, at most, for cancelled receives to come back.
constexpr std::chrono::milliseconds kCloseLinger{1000};
/// After a bye, the messages it says were sent before it must land within this.
constexpr std::chrono::seconds kByeGrace{5};
/// The dialling side of endpoint_connect repeats an unanswered hello this
/// often; a polled connect's lower rank repeats its call-me as often.
constexpr std::chrono::milliseconds kHelloRepeat{500};
/// A polled connect's first call waits this long, at most, for the peer
/// watch's socket to connect (socket liveness only; a local listener
/// accepts in the kernel, without its owner's help).
constexpr int kWatchDialLimitMs = 2000;

}  // namespace

// ---- connection setup ---------------------------------------------------------

int Endpoint::connect(const void* peer_blob, std::size_t length, int timeout_ms) {
  if (closing_)
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_connect: the endpoint is closed");
  // From here on the peer's hello or call-me no longer raises a request.
  connect_called_ = true;
  if (timeout_ms == 0) return connect_polled(peer_blob, length);
  if (connected_) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "endpoint_connect: the endpoint to " + who() + " is already connected");
  }
  if (polled_) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "endpoint_connect: the endpoint to " + who() +
                    " is in a polled connect; a blocking connect cannot take it over");
  }
  const Deadline deadline = Deadline::after_ms(timeout_ms);
  adopt(peer_blob, length, deadline);
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
    if (handshake_done()) break;
    check_reachable({});
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
  ctx_.note_unconnected(-1);
  log(CHORUS_LOG_DEBUG, "rank " + std::to_string(ctx_.rank()) + " connected to " + who());
  return CHORUS_OK;
}

int Endpoint::connect_polled(const void* peer_blob, std::size_t length) {
  if (connected_) return CHORUS_OK;
  if (!polled_) {
    // The peer watch's dial (socket liveness only) is the one step that
    // waits on the network; it is bounded well below any connect deadline.
    const wire::Blob blob = adopt(peer_blob, length, Deadline::after_ms(kWatchDialLimitMs));
    if (ctx_.rank() < peer_rank_) {
      // With manual progress (tcp;ofi_rxm, verbs;ofi_rxm; shm's first send
      // to a peer too) a first message to a context this one has no
      // provider connection with yet stays in the provider until both
      // contexts have progressed a few times in turn, and the caller need
      // not progress this one again before the peer answers (the peer, told
      // nothing, never would). So the call-me goes outside the fabric when
      // it can: a datagram to the peer's doorbell, or a TCP connection of
      // its own to the peer's watch listener, done once the kernel has the
      // bytes. Only when neither reaches the peer does the call-me go over
      // the fabric (repeated from progress(), so it needs a caller that
      // keeps progressing this context, as the core does while it waits).
      callme_oob_ = ctx_.call_me(blob, Deadline::after_ms(kWatchDialLimitMs));
    }
    polled_ = true;
    log(CHORUS_LOG_DEBUG, "rank " + std::to_string(ctx_.rank()) + " starts a polled connect to " +
                              who() + (ctx_.rank() > peer_rank_ ? " (hello)" : " (call-me)"));
    // The first opener goes now; check_deadline() repeats it from the
    // context's progress until the exchange completes.
    next_opener_ = Deadline::Clock::now();
    send_opener();
  }
  ctx_.progress();
  if (handshake_done()) {
    connected_ = true;
    ctx_.note_unconnected(-1);
    next_opener_ = Deadline::Clock::time_point::max();
    log(CHORUS_LOG_DEBUG,
        "rank " + std::to_string(ctx_.rank()) + " connected to " + who() + " (polled connect)");
    return CHORUS_OK;
  }
  check_reachable("polled connect of rank " + std::to_string(ctx_.rank()) + " to " + who() + ": ");
  return CHORUS_ERR_AGAIN;
}

wire::Blob Endpoint::adopt(const void* peer_blob, std::size_t length,
                           const Deadline& watch_deadline) {
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
  ctx_.watch(*blob, watch_deadline);
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
  return *blob;
}

bool Endpoint::handshake_done() const {
  // The lower rank is done once its ack is with the provider, not merely
  // queued behind -FI_EAGAIN: verbs;ofi_rxm can deliver the hello over a
  // connection it accepted and still refuse sends on it for a while (it
  // handles connection events at most every 10 ms of progress calls). A
  // caller that stops progressing this context once connect returns (a
  // thread joining the peer's connect, say) would strand the ack, and the
  // peer's connect would time out.
  if (ctx_.rank() > peer_rank_) return acked_;
  return hello_key_ == peer_key_ && !control_queued(wire::ControlType::kAck);
}

void Endpoint::check_reachable(const std::string& prefix) const {
  if (bye_seen_) {
    throw Error(CHORUS_ERR_PEER_LOST, prefix + who() + " closed its endpoint before connecting");
  }
  std::string why;
  if (ctx_.rank_dead(peer_rank_, &why)) throw Error(CHORUS_ERR_PEER_LOST, prefix + why);
  if (!control_error_.empty()) {
    throw Error(CHORUS_ERR_PEER_LOST, prefix + "reaching " + who() + ": " + control_error_);
  }
}

void Endpoint::send_opener() {
  const auto now = Deadline::Clock::now();
  if (!polled_ || connected_ || closing_ || now < next_opener_) return;
  next_opener_ = now + kHelloRepeat;
  ctx_.note_deadline(next_opener_);
  if (ctx_.rank() > peer_rank_) {
    // The higher rank dials, as in a blocking connect. Its hello says
    // "polled", so a lower rank that has not called connect is asked to.
    if (!acked_ && !control_queued(wire::ControlType::kHello))
      send_control(wire::ControlType::kHello, peer_addr_, peer_key_, 0, wire::kFlagPolled);
    return;
  }
  // The lower rank never says hello, even when both sides start at once: it
  // asks the higher rank to, and answers that hello with the usual ack. A
  // lost call-me (or one that reached an endpoint whose owner has not
  // connected yet) is repeated until the hello arrives.
  if (!callme_oob_ && hello_key_ != peer_key_ && !control_queued(wire::ControlType::kCallMe))
    send_control(wire::ControlType::kCallMe, peer_addr_, peer_key_, 0);
}

void Endpoint::on_call_me() {
  if (peer_rank_ >= ctx_.rank() || bye_seen_) return;  // only a lower rank asks
  raise_connect_request();
  // Both sides started: the first hello may have crossed the call-me (and
  // been lost by a provider setting up both directions at once), so say it
  // again now rather than at the next repeat.
  if (polled_ && !connected_ && !acked_ && !control_queued(wire::ControlType::kHello))
    send_control(wire::ControlType::kHello, peer_addr_, peer_key_, 0, wire::kFlagPolled);
}

void Endpoint::raise_connect_request() {
  if (connect_called_ || request_raised_ || closing_) return;
  request_raised_ = true;
  ctx_.completions().push(handle(), CHORUS_TP_OP_CONNECT_REQUEST, 0, 0);
  log(CHORUS_LOG_DEBUG,
      "rank " + std::to_string(ctx_.rank()) + ": " + who() + " asks to connect (connect request)");
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
                            std::uint64_t count, std::uint8_t flags) {
  auto it = std::find_if(control_tx_.begin(), control_tx_.end(),
                         [](const ControlSlot& s) { return s.state == ControlSlot::State::kFree; });
  if (it == control_tx_.end() || ep_ == nullptr) {
    log(CHORUS_LOG_DEBUG, "control message to " + who() + " dropped: no free slot");
    return;
  }
  const std::span<const std::byte> my_name =
      type == wire::ControlType::kHello ? ctx_.name() : std::span<const std::byte>{};
  it->length = wire::encode(type, flags, key_, count, my_name, it->buf.data());
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
      // A polled connect's hello asks this side to connect too; one that
      // arrives before this side's endpoint_connect is remembered (hello_key_
      // and the ack sent below), so that connect completes at once.
      if ((c->flags & wire::kFlagPolled) != 0) raise_connect_request();
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
    case wire::ControlType::kCallMe: {
      // Only a lower rank asks; the higher one dials (with its hello).
      if (peer_key_ != 0 && c->sender_key != peer_key_) {
        log(CHORUS_LOG_DEBUG, "ignored a call-me from a stale endpoint of " + who());
        return;
      }
      callme_key_ = c->sender_key;
      on_call_me();
      return;
    }
    case wire::ControlType::kBye: {
      const std::uint32_t expected =
          peer_key_ != 0 ? peer_key_ : (hello_key_ != 0 ? hello_key_ : callme_key_);
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
    if (connected_ || (polled_ && peer_addr_ != FI_ADDR_UNSPEC)) {
      // A polled connect under way: the peer may already have been asked
      // (a connect request); the bye makes its connect fail at once.
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
