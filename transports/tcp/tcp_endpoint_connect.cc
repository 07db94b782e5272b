// Endpoint (tcp_endpoint.h): connection setup. A blocking connect dials
// (higher rank) or collects from the acceptor (lower rank) within its
// timeout; a polled connect (timeout 0, CHORUS_TP_CAP_CONNECT_POLL) does the
// same without blocking, with a background thread for the dialing.
//
// Polled connects, per pair (the higher rank H always dials the lower L):
//  - H first: its thread dials every socket with the kHelloPolled flag; L's
//    acceptor parks them and, if L has not asked for the endpoint yet, its
//    context reports a connect request, after which L's polled connect
//    takes the parked sockets.
//  - L first: nothing is parked yet, so L's thread sends one authenticated
//    call-me Hello to H's listener; H's context reports a connect request,
//    and H's polled connect dials as above. L returns AGAIN until H's
//    sockets are parked.
//  - Both at once: the call-me is ignored (H has started), H's dial is the
//    one connection.
#include "tcp_endpoint.h"

#include <chorus/transport_names.hpp>
#include "tcp.h"

#include <utility>
#include "tcp_connector.h"
#include "tcp_context.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>

namespace chorus::tcp {

namespace {

asio::ip::tcp::endpoint remote_of(const wire::Blob& b) {
  asio::ip::address address;
  if (b.family == 4) {
    asio::ip::address_v4::bytes_type v4;
    std::copy_n(b.address.begin(), v4.size(), v4.begin());
    address = asio::ip::address_v4(v4);
  } else {
    asio::ip::address_v6::bytes_type v6;
    std::copy_n(b.address.begin(), v6.size(), v6.begin());
    address = asio::ip::address_v6(v6);
  }
  return asio::ip::tcp::endpoint(address, b.port);
}

}  // namespace

wire::Blob Endpoint::check_blob(const void* peer_blob, std::size_t length) const {
  if (connected_)
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "endpoint to " + who() + " is already connected");
  wire::Blob b;
  if (!wire::decode(peer_blob, length, b)) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "the peer address (" + std::to_string(length) +
                    " bytes) is not a TCP transport address blob of this version");
  }
  if (b.rank != peer_rank_ || b.peer_rank != ctx_.rank() || b.channel != channel_) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "address blob mix-up: it is rank " + std::to_string(b.rank) + "'s endpoint for " +
                    endpoint_name(b.peer_rank, b.channel, ctx_.data_channels()) +
                    ", but this is rank " + std::to_string(ctx_.rank()) + "'s endpoint for " +
                    who());
  }
  if (b.sockets != nsockets_) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "transport.tcp.sockets is " + std::to_string(nsockets_) + " on rank " +
                    std::to_string(ctx_.rank()) + " but " + std::to_string(b.sockets) +
                    " on rank " + std::to_string(peer_rank_) +
                    "; every rank must use the same value");
  }
  return b;
}

int Endpoint::connect(const void* peer_blob, std::size_t length, int timeout_ms) {
  if (connected_ && timeout_ms == 0) return CHORUS_OK;  // a poll after success
  const wire::Blob b = check_blob(peer_blob, length);
  if (timeout_ms == 0) return connect_polled(b);
  if (dial_ != nullptr || claimed_) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "endpoint to " + who() +
                    " is being connected by a polled endpoint_connect (timeout 0); keep polling "
                    "it instead of calling endpoint_connect with a timeout");
  }
  const Deadline deadline = Deadline::after_ms(timeout_ms);
  std::vector<int> fds;
  try {
    if (ctx_.rank() > peer_rank_) {
      // Active side: connect to the lower rank's listener.
      const asio::ip::tcp::endpoint remote = remote_of(b);
      for (int i = 0; i < nsockets_; ++i) {
        wire::Hello h;
        h.sockets = static_cast<std::uint16_t>(nsockets_);
        h.rank = ctx_.rank();
        h.peer_rank = peer_rank_;
        h.channel = channel_;
        h.index = static_cast<std::uint16_t>(i);
        h.target_nonce = b.nonce;
        h.sender_nonce = nonce_;
        fds.push_back(connect_socket(remote, h, ctx_.config(), ctx_.data_channels(), ctx_.job_key(),
                                     deadline));
      }
    } else {
      // Passive side: the acceptor thread has been collecting them.
      fds = ctx_.acceptor().take(nonce_, b.nonce, deadline);
      if (fds.empty()) {
        throw Error(CHORUS_ERR_TIMEOUT, "timed out after " + std::to_string(timeout_ms) +
                                            " ms waiting for " + who() + " to connect to " +
                                            ctx_.listen_address());
      }
    }
    attach(fds);
  } catch (...) {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
    release_sockets();
    throw;
  }
  return CHORUS_OK;
}

int Endpoint::connect_polled(const wire::Blob& b) {
  const bool higher = ctx_.rank() > peer_rank_;
  if (!higher) {
    claimed_ = true;
    bool dialing = false;
    std::vector<int> fds = ctx_.acceptor().try_take(nonce_, b.nonce, dialing);
    if (!fds.empty()) {
      retire_dial();  // a call-me still under way is no longer needed
      attach_or_close(fds);
      return CHORUS_OK;
    }
    if (dial_ == nullptr) {
      // The peer is not dialing yet: ask it to (it may never have heard of us).
      if (!dialing) start_dial(b, true);
    } else {
      std::unique_lock lock(dial_->mu);
      if (dial_->done && dial_->status != CHORUS_OK) {
        const int status = dial_->status;
        const std::string error = dial_->error;
        lock.unlock();
        stop_dial();
        throw Error(status, error);
      }
    }
    return set_last_error(CHORUS_ERR_AGAIN, "still waiting for " + who() + " to connect");
  }
  if (dial_ == nullptr) {
    ctx_.acceptor().mark_started(nonce_);
    start_dial(b, false);
    return set_last_error(CHORUS_ERR_AGAIN, "connecting to " + who() + " has started");
  }
  std::vector<int> fds;
  int status = CHORUS_OK;
  std::string error;
  {
    std::lock_guard lock(dial_->mu);
    if (!dial_->done) return set_last_error(CHORUS_ERR_AGAIN, "still connecting to " + who());
    status = dial_->status;
    error = dial_->error;
    fds = std::move(dial_->fds);
  }
  stop_dial();
  if (status != CHORUS_OK) throw Error(status, error);
  attach_or_close(fds);
  return CHORUS_OK;
}

void Endpoint::attach_or_close(std::vector<int>& fds) {
  try {
    attach(fds);
  } catch (...) {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    release_sockets();
    throw;
  }
}

void Endpoint::start_dial(const wire::Blob& b, bool call_me) {
  dial_ = std::make_unique<Dial>();
  Dial* d = dial_.get();
  wire::Hello h;
  h.sockets = static_cast<std::uint16_t>(nsockets_);
  h.rank = ctx_.rank();
  h.peer_rank = peer_rank_;
  h.channel = channel_;
  h.target_nonce = b.nonce;
  h.sender_nonce = nonce_;
  h.flags = call_me ? wire::kHelloCallMe : wire::kHelloPolled;
  const asio::ip::tcp::endpoint remote = remote_of(b);
  const int sockets = call_me ? 1 : nsockets_;
  Context& ctx = ctx_;
  d->thread = std::thread([d, h, remote, sockets, &ctx]() mutable {
    // Signals belong to the host's threads, not to ours.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    std::vector<int> fds;
    int status = CHORUS_OK;
    std::string error;
    try {
      DialControl control;
      control.cancel = &d->cancel;
      for (int i = 0; i < sockets; ++i) {
        h.index = static_cast<std::uint16_t>(i);
        fds.push_back(connect_socket(remote, h, ctx.config(), ctx.data_channels(), ctx.job_key(),
                                     Deadline::after_ms(-1), control));
      }
    } catch (const Error& e) {
      status = e.status();
      error = e.what();
    } catch (const std::exception& e) {
      status = CHORUS_ERR_INTERNAL;
      error = e.what();
    }
    if (status != CHORUS_OK || (h.flags & wire::kHelloCallMe)) {
      for (int fd : fds) ::close(fd);  // a call-me's socket has done its job
      fds.clear();
    }
    {
      std::lock_guard lock(d->mu);
      d->status = status;
      d->error = std::move(error);
      d->fds = std::move(fds);
      d->done = true;
    }
    ctx.interrupt();  // a caller asleep in wait() polls the connect again
  });
}

void Endpoint::retire_dial() {
  if (dial_ == nullptr) return;
  std::unique_ptr<Dial> older = std::move(retired_dial_);  // not expected: one call-me each
  retired_dial_ = std::move(dial_);
  if (older != nullptr) {
    dial_ = std::move(older);
    stop_dial();
  }
}

void Endpoint::stop_dial() {
  if (dial_ == nullptr) return;
  dial_->cancel.store(true, std::memory_order_release);
  if (dial_->thread.joinable()) dial_->thread.join();
  for (int fd : dial_->fds) ::close(fd);
  dial_.reset();
}

}  // namespace chorus::tcp
