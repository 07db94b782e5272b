// Joining as rank 0: listen on the coordinator port, accept callers, run
// the authentication handshake, check each hello against the job, admit or
// refuse, detect a second job on the same port, and refuse late callers
// after the job has formed. The accept loop and the acceptor's half of the
// handshake serve the other ranks' ring-link listeners too
// (bootstrap_link.cc), so every side-channel connection is admitted alike.

#include "core/bootstrap_impl.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <utility>

namespace chorus::core {

Status Bootstrap::Impl::join_as_root(Deadline deadline) {
  const auto start = Clock::now();
  peers_.assign(static_cast<std::size_t>(size_), nullptr);

  std::vector<tcp::endpoint> endpoints;
  if (const auto ec = resolve(deadline, endpoints)) {
    return fail(error(CHORUS_ERR_SYSTEM, "cannot resolve the coordinator host '", host_.host, "' (",
                      ec.message(), "); the coordinator address (", coordinator_,
                      ") must name rank 0's host"));
  }
  if (Status s = listen(endpoints); !s.is_ok()) {
    if (port_taken_ && size_ > 1) announce_collision(deadline);
    return fail(std::move(s));
  }
  if (token_.empty()) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      log(CHORUS_LOG_WARN,
          cat("rank 0: no job token is set (bootstrap.job_token / CHORUS_JOB_TOKEN): any process "
              "that can reach ",
              coordinator_, " can join this job",
              identity_.empty() ? ", and ranks of a second job started on the same port can be "
                                  "taken for this job's"
                                : "",
              ". Set the same secret token on every rank (chorusrun sets one; see "
              "docs/reliability.md)"));
    }
  }
  join_deadline_ = deadline;
  accept_next();

  Status status = pump(
      deadline, [this] { return join_step(); },
      [&] {
        std::vector<int> missing;
        for (int r = 1; r < size_; ++r) {
          if (!peers_[static_cast<std::size_t>(r)]) missing.push_back(r);
        }
        return error(CHORUS_ERR_TIMEOUT, "timed out after ", seconds_text(Clock::now() - start),
                     " waiting for ", ranks_text(missing), " to join the side channel at ",
                     coordinator_, " (", size_ - 1 - static_cast<int>(missing.size()), " of ",
                     size_ - 1,
                     " joined); were they started, with the same coordinator address and job "
                     "size?");
      });
  if (status.is_ok()) {
    formed_ = true;
    refuse_late_callers();
  }
  asio::error_code ignored;
  acceptor_.close(ignored);
  accept_retry_.cancel();
  contested_timer_.cancel();
  if (!status.is_ok()) {
    settle_pending();
    return fail(std::move(status));
  }
  // Callers still in their handshake stay open through the welcome (their
  // challenge may still be on its way out) and are refused after it.

  // Each rank learns where the ring neighbours it connects to listen.
  welcomes_.assign(static_cast<std::size_t>(size_), {});
  for (int r = 1; r < size_; ++r) {
    const ConnPtr& c = peers_[static_cast<std::size_t>(r)];
    c->allowed = bit(frame::Type::kContribute) | bit(frame::Type::kAbort);
    if (ring::feeds_root(r, size_)) c->allowed |= bit(frame::Type::kPass);
    Bytes& welcome = welcomes_[static_cast<std::size_t>(r)];
    welcome = frame::encode_frame(frame::Type::kWelcome,
                                  frame::encode_welcome({size_, tag_, ring_addresses(r)}));
    send(c, asio::buffer(welcome));
  }
  status = pump(
      deadline,
      [this]() -> std::optional<Status> {
        for (const ConnPtr& c : std::exchange(events_, {})) {
          if (c->pending || c->shut) continue;  // a caller that is not one of the job's ranks
          if (!c->write_error.empty()) {
            return error(CHORUS_ERR_PEER_LOST, "lost rank ", c->rank, " while welcoming it (",
                         c->write_error, ")");
          }
        }
        if (writes_in_flight_ == 0) return Status::ok();
        return std::nullopt;
      },
      [&] {
        std::vector<int> slow;
        for (int r = 1; r < size_; ++r) {
          if (peers_[static_cast<std::size_t>(r)]->writes > 0) slow.push_back(r);
        }
        return error(CHORUS_ERR_TIMEOUT, "timed out after ", seconds_text(Clock::now() - start),
                     " sending the welcome to ", ranks_text(slow));
      });
  settle_pending();
  if (!status.is_ok()) return fail(std::move(status));
  log(CHORUS_LOG_INFO, cat("rank 0: all ", size_, " ranks joined the side channel at ",
                           coordinator_, " in ", seconds_text(Clock::now() - start)));
  return Status::ok();
}

Status Bootstrap::Impl::listen(const std::vector<tcp::endpoint>& endpoints) {
  asio::error_code first;
  tcp::endpoint first_endpoint;
  for (const tcp::endpoint& ep : endpoints) {
    asio::error_code ec;
    acceptor_.open(ep.protocol(), ec);
    if (!ec) {
      set_cloexec(acceptor_.native_handle());
      // Lets a new job take the port over from connections of an old one in
      // TIME_WAIT; on Linux it still refuses a port someone is listening on.
      acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    }
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) {
      log(CHORUS_LOG_INFO, cat("rank 0: listening on ", endpoint_text(ep), " (coordinator ",
                               coordinator_, ") for ", size_ - 1, " ranks"));
      return Status::ok();
    }
    asio::error_code ignored;
    acceptor_.close(ignored);
    if (!first) {
      first = ec;
      first_endpoint = ep;
    }
    if (ec == asio::error::address_in_use) {
      port_taken_ = true;
      break;
    }
  }
  if (first == asio::error::address_in_use) {
    return error(CHORUS_ERR_SYSTEM, "cannot listen on ", endpoint_text(first_endpoint),
                 " for the side channel (", first.message(),
                 "); another process (another job, or an earlier run of this one) holds that "
                 "port: stop it or choose another port in the coordinator address");
  }
  return error(CHORUS_ERR_SYSTEM, "cannot listen on ", endpoint_text(first_endpoint),
               " for the side channel (", first.message(),
               "); rank 0 must run on the host the "
               "coordinator address (",
               coordinator_, ") names");
}

void Bootstrap::Impl::accept_next() {
  auto c = std::make_shared<Conn>(io_);
  acceptor_.async_accept(c->socket, [this, c](const asio::error_code& ec) {
    if (!acceptor_.is_open() || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Typically EMFILE: wait a little instead of spinning, keep listening.
      log(CHORUS_LOG_WARN, cat("rank ", rank_, ": accepting on the side channel failed (",
                               ec.message(), "); retrying"));
      accept_retry_.expires_after(std::chrono::milliseconds(50));
      accept_retry_.async_wait([this](const asio::error_code& e) {
        if (!e && acceptor_.is_open()) accept_next();
      });
      return;
    }
    set_cloexec(c->socket.native_handle());
    asio::error_code ignored;
    c->socket.set_option(tcp::no_delay(true), ignored);
    const tcp::endpoint remote = c->socket.remote_endpoint(ignored);
    c->where = ignored ? std::string("an unknown address") : endpoint_text(remote);
    std::erase_if(pending_, [](const ConnPtr& p) { return !p->pending; });
    if (pending_.size() >= kMaxPending) {
      log(CHORUS_LOG_WARN, cat("rank ", rank_, ": more than ", kMaxPending,
                               " connections have not said hello; dropped the oldest, from ",
                               pending_.front()->where));
      drop(*pending_.front(), nullptr);
      pending_.erase(pending_.begin());
    }
    c->pending = true;
    // The order (auth-init, auth-proof, hello) is enforced by handshake_step;
    // abort lets a rank that refuses rank 0's proof say why before it leaves.
    c->allowed = bit(frame::Type::kAuthInit) | bit(frame::Type::kAuthProof) |
                 bit(frame::Type::kHello) | bit(frame::Type::kAbort);
    c->handshake_timer.expires_after(kHandshakeTimeout);
    c->handshake_timer.async_wait([this, c](const asio::error_code& e) {
      if (e || c->shut || !c->pending) return;
      mark_gone(c, Gone::kProtocol,
                cat("no authenticated hello within ", kHandshakeTimeout.count(), " s"));
    });
    pending_.push_back(c);
    read_frames(c);
    accept_next();
  });
}

/// The pending callers that got a frame or went away: runs their handshake
/// and drops those that failed it. Called by pump() before every step, on
/// every rank that listens, so that no step has to know about callers.
void Bootstrap::Impl::serve_callers() {
  if (pending_.empty()) return;
  std::vector<ConnPtr> callers;
  std::erase_if(events_, [&](const ConnPtr& c) {
    if (!c->pending) return false;
    callers.push_back(c);
    return true;
  });
  for (const ConnPtr& c : callers) caller_event(c);
}

void Bootstrap::Impl::caller_event(const ConnPtr& c) {
  // Once rank 0's job has formed, a caller's handshake goes no further: it
  // is refused by settle_pending() after the welcome.
  if (c->shut || formed_) return;
  while (c->pending && !c->inbox.empty()) handshake_step(c);
  if (c->pending && c->gone == Gone::kAbort) {
    log(CHORUS_LOG_WARN, cat("rank ", rank_, ": dropped a connection from ", c->where,
                             ": it gave up during the handshake (", quoted(c->why), ")"));
    drop(*c, nullptr);
  } else if (c->pending && c->gone != Gone::kNo) {
    log(CHORUS_LOG_WARN,
        cat("rank ", rank_, ": dropped a connection from ", c->where, " before ",
            c->auth == Auth::kDone ? "it said hello" : "it authenticated", " (", c->why, ")"));
    drop(*c, nullptr);
  }
}

/// Once the join is over: no more callers; those still in the handshake go.
void Bootstrap::Impl::drop_callers() {
  asio::error_code ignored;
  acceptor_.close(ignored);
  accept_retry_.cancel();
  for (const ConnPtr& c : pending_) {
    if (!c->pending) continue;  // admitted or dropped already
    log(CHORUS_LOG_WARN,
        cat("rank ", rank_, ": dropped a connection from ", c->where, " that never said hello"));
    drop(*c, nullptr);
  }
  pending_.clear();
  // Events of dropped callers (a failed challenge write) are not the job's.
  std::erase_if(events_, [](const ConnPtr& c) { return c->shut; });
}

std::optional<Status> Bootstrap::Impl::join_step() {
  for (const ConnPtr& c : std::exchange(events_, {})) {
    if (c->shut || c->pending) continue;
    if (c->rank > 0 && peers_[static_cast<std::size_t>(c->rank)] == c && c->gone != Gone::kNo) {
      log(CHORUS_LOG_WARN,
          cat("rank 0: rank ", c->rank, " (", c->where, ") left before every rank had joined (",
              c->why, "); waiting for it to come back"));
      drop(*c, nullptr);
      peers_[static_cast<std::size_t>(c->rank)].reset();
      --joined_;
    }
  }
  if (!contested_.empty() && Clock::now() >= contested_until_) {
    return error(CHORUS_ERR_INVALID_ARGUMENT, "this job cannot tell its ranks from another job's (",
                 contested_, "), so no rank was admitted: ", kTwoJobsFix);
  }
  if (joined_ == size_ - 1) return Status::ok();
  return std::nullopt;
}

/// Makes the join fail: a second job shares the port, and nothing (token,
/// launcher's job identity) tells whose rank is whose, so any rank admitted
/// so far may be the other job's. Every joined rank and every later caller
/// is refused with the reason; the join fails after kContestedLinger.
void Bootstrap::Impl::contest(const std::string& why) {
  if (!contested_.empty()) return;
  contested_ = why;
  log(CHORUS_LOG_ERROR,
      cat("rank 0: ", why,
          "; this job cannot tell its ranks from another job's and fails: ", kTwoJobsFix));
  const frame::Abort abort{
      CHORUS_ERR_INVALID_ARGUMENT,
      cat("rank 0 at ", coordinator_, ": this job cannot tell its ranks from another job's (", why,
          "): ", kTwoJobsFix)};
  for (ConnPtr& c : peers_) {
    if (!c) continue;
    drop(*c, &abort);
    c.reset();
  }
  joined_ = 0;
  contested_until_ = std::min(Clock::now() + kContestedLinger, join_deadline_.at());
  contested_timer_.expires_at(contested_until_);
  contested_timer_.async_wait([](const asio::error_code&) {});
}

/// After the join: the port stays rank 0's for the job's lifetime, and every
/// caller gets a refusal at once (LateArrivals), so a late, stale or foreign
/// rank fails by protocol, not by its init deadline, and the port is not
/// free for a second job to take.
void Bootstrap::Impl::refuse_late_callers() {
  const int fd = ::fcntl(acceptor_.native_handle(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return;
  const std::string text =
      cat("the job at ", coordinator_, " (", size_,
          " ranks) had already formed when this process arrived, and admits no more ranks: ",
          kTwoJobsFix);
  late_ = std::make_unique<LateArrivals>(
      fd,
      frame::encode_frame(frame::Type::kAbort,
                          frame::encode_abort(CHORUS_ERR_INVALID_ARGUMENT, text)),
      [this](const std::string& where) {
        log(CHORUS_LOG_WARN,
            cat("rank 0: refused a caller from ", where,
                " that arrived after the job formed (a stale rank, or a rank of another job on "
                "this port); later ones are refused without a log line"));
      });
}

/// The join is over: callers that had not said hello by then are not this
/// job's ranks. Once the job has formed (late_ exists) each gets the late
/// caller's refusal, so a rank of another job that was mid-handshake fails
/// with the cause instead of retrying until its init deadline; a caller with
/// a write still queued, or after a failed join, is dropped as before.
void Bootstrap::Impl::settle_pending() {
  for (const ConnPtr& c : pending_) {
    if (!c->pending) continue;  // admitted (now in peers_) or dropped already
    const int fd = late_ && c->writes == 0 && c->gone == Gone::kNo && c->socket.is_open()
                       ? ::fcntl(c->socket.native_handle(), F_DUPFD_CLOEXEC, 0)
                       : -1;
    if (fd >= 0) {
      log(CHORUS_LOG_WARN, cat("rank 0: refused a connection from ", c->where,
                               " that had not said hello when the job formed (a rank of another "
                               "job on this port, or a stale rank)"));
      // Not drop(): a half-close would reach the caller before the refusal.
      close(c.get());
      c->pending = false;
      late_->adopt(fd);
    } else {
      log(CHORUS_LOG_WARN,
          cat("rank 0: dropped a connection from ", c->where, " that never said hello"));
      drop(*c, nullptr);
    }
  }
  pending_.clear();
  // Events of dropped callers (a failed challenge write) are not the job's.
  std::erase_if(events_, [](const ConnPtr& c) { return c->shut; });
}

/// This process was to be rank 0 but the port is taken. If the holder is
/// rank 0 of a job that is still forming and cannot tell jobs apart, it must
/// learn that a second job is starting here: say hello to it as rank 0,
/// which it refuses (and remembers). Bounded by kCollisionNotice.
void Bootstrap::Impl::announce_collision(Deadline deadline) {
  hello_ = frame::encode_frame(frame::Type::kHello, frame::encode_hello({0, size_, tag_}));
  std::string last_error = "none";
  const auto until = Deadline::earliest(
      deadline,
      Deadline::after(std::chrono::duration_cast<std::chrono::milliseconds>(kCollisionNotice)));
  const auto outcome = try_join(until, Clock::now(), last_error);
  if (coord_) {
    close(coord_.get());
    drain();
    coord_.reset();
  }
  log(CHORUS_LOG_DEBUG,
      cat("rank 0: told the holder of ", coordinator_, " that a second job is starting there (",
          outcome && !outcome->is_ok() ? outcome->message() : last_error, ")"));
}

/// One frame of a caller that has not been admitted yet. Rank 0 answers an
/// auth-init with its challenge, checks the proof, and only then reads a
/// hello; anything else, or anything out of that order, drops the caller.
void Bootstrap::Impl::handshake_step(const ConnPtr& c) {
  const Frame f = std::move(c->inbox.front());
  c->inbox.pop_front();
  if (c->auth == Auth::kNew && f.type == frame::Type::kAuthInit) {
    const auto init = frame::decode_auth_init(f.payload);
    if (!init) return refuse(c, "malformed auth-init frame", false);
    std::copy(init->rank_nonce.begin(), init->rank_nonce.end(), c->rank_nonce.begin());
    c->root_nonce = auth::random_nonce();
    frame::AuthChallenge challenge;
    std::copy(c->root_nonce.begin(), c->root_nonce.end(), challenge.root_nonce.begin());
    const auth::Mac proof = auth::coordinator_proof(token_, c->rank_nonce, c->root_nonce);
    std::copy(proof.begin(), proof.end(), challenge.proof.begin());
    c->auth_frame =
        frame::encode_frame(frame::Type::kAuthChallenge, frame::encode_auth_challenge(challenge));
    c->auth = Auth::kChallenged;
    send(c, asio::buffer(c->auth_frame));
    return;
  }
  if (c->auth == Auth::kChallenged && f.type == frame::Type::kAuthProof) {
    const auto proof = frame::decode_auth_proof(f.payload);
    if (!proof) return refuse(c, "malformed auth-proof frame", false);
    const auth::Mac expected = auth::rank_proof(token_, c->rank_nonce, c->root_nonce);
    if (!auth::same_mac(proof->proof, expected)) {
      return refuse(c,
                    "authentication failed: it does not know this job's token (a process of "
                    "another job, a different CHORUS_JOB_TOKEN, or not a Chorus rank)",
                    false);
    }
    c->auth = Auth::kDone;
    return;
  }
  if (c->auth == Auth::kDone && f.type == frame::Type::kHello) return admit(c, f);
  refuse(c,
         cat("sent a ", frame::type_name(f.type), " frame ",
             c->auth == Auth::kDone ? "after authenticating instead of a hello"
                                    : "before authenticating"),
         false);
}

/// Drops a caller rank 0 will not admit. `tell`: the caller proved it knows
/// the token, so it is one of ours and gets the reason in an abort frame;
/// strangers get nothing but a closed connection.
void Bootstrap::Impl::refuse(const ConnPtr& c, const std::string& why, bool tell) {
  const std::string text = cat("rank ", rank_, ": refused a connection from ", c->where, ": ", why);
  log(CHORUS_LOG_WARN, text);
  const frame::Abort abort{CHORUS_ERR_INVALID_ARGUMENT, text};
  drop(*c, tell ? &abort : nullptr);
}

void Bootstrap::Impl::admit(const ConnPtr& c, const Frame& hello_frame) {
  const auto hello = frame::decode_hello(hello_frame.payload);
  const std::string why = !hello       ? std::string("malformed hello")
                          : rank_ == 0 ? check_hello(*hello, *c)
                                       : check_link_hello(*hello);
  if (!why.empty()) return refuse(c, why, true);
  c->pending = false;
  c->handshake_timer.cancel();
  if (rank_ != 0) return admit_link(c, *hello);
  c->rank = hello->rank;
  c->listen = hello->listen;
  c->allowed = bit(frame::Type::kAbort);  // nothing else until it is welcomed
  peers_[static_cast<std::size_t>(c->rank)] = c;
  ++joined_;
  log(CHORUS_LOG_DEBUG, cat("rank 0: rank ", c->rank, " joined from ", c->where, " (", joined_,
                            " of ", size_ - 1, ")"));
}

/// Whether an authenticated caller fits into this job. The tag check only
/// catches a token that differs but hashes alike, i.e. a bug; the proof
/// already showed the token is right. Returns why not, or "" when it fits.
std::string Bootstrap::Impl::check_hello(const frame::Hello& hello, const Conn& c) {
  const auto contested_text = [this] {
    return cat("this job cannot tell its ranks from another job's (", contested_,
               "): ", kTwoJobsFix);
  };
  if (!contested_.empty()) return contested_text();
  if (hello.job_tag != tag_) {
    // The authentication passed, so the tokens agree: the launcher's job
    // identities differ.
    return cat("it belongs to another job: its launcher's job identity differs from this job's (",
               identity_.empty() ? std::string("this job has none") : "this job is " + identity_,
               "); two jobs were started on one coordinator port. Fix: give each job its own "
               "port (CHORUS_COORDINATOR, MASTER_PORT)");
  }
  if (hello.size != size_) {
    return cat("it was started for a job of ", hello.size, " ranks, this job has ", size_,
               " (is the job size the same on every rank? If it is: ", kTwoJobsFix, ")");
  }
  if (hello.rank == 0 && token_.empty() && identity_.empty()) {
    contest(cat("a second rank 0, of a job of ", hello.size,
                " ranks, tried to start on this port (from ", c.where, ")"));
    return contested_text();
  }
  if (hello.rank < 1 || hello.rank >= size_) {
    return cat("it claims rank ", hello.rank, ", but only ranks 1..", size_ - 1,
               " connect to rank 0");
  }
  if (const ConnPtr& holder = peers_[static_cast<std::size_t>(hello.rank)]) {
    if (token_.empty() && identity_.empty()) {
      contest(cat("rank ", hello.rank, " was claimed twice, from ", holder->where, " and from ",
                  c.where));
      return contested_text();
    }
    return cat("it claims rank ", hello.rank, ", which already joined from ", holder->where,
               ": a stale rank of an earlier run, or the same rank given to two processes. Fix: "
               "give each rank number to one process; jobs that share a token need a port each");
  }
  return {};
}

}  // namespace chorus::core
