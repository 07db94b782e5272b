// Joining as any other rank: connect to rank 0, open the listener for ring
// links, authenticate both ways, say hello and wait for the welcome,
// retrying with backoff until the init deadline while rank 0 is not up yet;
// then link with the ring neighbours (bootstrap_link.cc). The connecting
// half of the handshake here serves the ring links too.

#include "core/bootstrap_impl.h"

#include <asio/connect.hpp>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>
#include <utility>

namespace chorus::core {

Status Bootstrap::Impl::join_as_peer(Deadline deadline) {
  const auto start = Clock::now();
  if (size_ > 1 && token_.empty()) {
    asio::error_code ec;
    const auto address = asio::ip::make_address(host_.host, ec);
    if (ec || !address.is_loopback()) {
      log(CHORUS_LOG_WARN,
          cat("no job token is set (bootstrap.job_token / CHORUS_JOB_TOKEN) and the coordinator ",
              coordinator_,
              " is not on loopback: any process that can reach it can join this job. Set the "
              "same secret token on every rank (see docs/reliability.md)"));
    }
  }
  std::string last_error = "none";
  auto pause = std::chrono::duration_cast<Clock::duration>(kRetryFirst);
  for (int attempt = 1;; ++attempt) {
    if (auto outcome = try_join(deadline, start, last_error)) {
      if (!outcome->is_ok()) return fail(std::move(*outcome));
      coord_->allowed = bit(frame::Type::kDeliver) | bit(frame::Type::kAbort);
      // Rank 0 sends its all_gather blob to rank 1 only (bootstrap_ring.h).
      if (rank_ == 1) coord_->allowed |= bit(frame::Type::kPass);
      log(CHORUS_LOG_DEBUG, cat("rank ", rank_, ": joined the side channel at ", coordinator_));
      if (Status s = link_ring(deadline, start); !s.is_ok()) return fail(std::move(s));
      return Status::ok();
    }
    if (deadline.expired()) {
      return fail(error(CHORUS_ERR_TIMEOUT, "could not reach coordinator ", coordinator_,
                        " within ", seconds_text(Clock::now() - start),
                        " (last error: ", last_error,
                        "); is rank 0 running and CHORUS_COORDINATOR the same on every rank?"));
    }
    if (attempt == 1 || attempt % 20 == 0) {
      log(CHORUS_LOG_DEBUG, cat("rank ", rank_, ": coordinator ", coordinator_,
                                " not reachable yet (", last_error, "); retrying"));
    }
    std::this_thread::sleep_for(
        std::min<Clock::duration>(pause, std::chrono::milliseconds(deadline.remaining_ms())));
    pause = std::min<Clock::duration>(pause * 3 / 2, kRetryMax);
  }
}

/// One attempt: connect, say hello, wait for the welcome. Returns the final
/// outcome, or nullopt to try again (with `last_error` updated).
std::optional<Status> Bootstrap::Impl::try_join(Deadline deadline, Clock::time_point start,
                                                std::string& last_error) {
  std::vector<tcp::endpoint> endpoints;
  if (const auto ec = resolve(deadline, endpoints)) {
    last_error = cat("cannot resolve '", host_.host, "': ", ec.message());
    return std::nullopt;
  }
  coord_ = std::make_shared<Conn>(io_);
  coord_->rank = 0;
  coord_->where = coordinator_;
  const auto attempt_deadline = Deadline::earliest(
      deadline,
      Deadline::after(std::chrono::duration_cast<std::chrono::milliseconds>(kConnectAttempt)));
  if (const auto ec = connect_once(endpoints, attempt_deadline)) {
    // Running out of the caller's time mid-attempt says nothing about the
    // coordinator: keep the reason of the attempt before.
    if (ec != asio::error::timed_out || !deadline.expired() || last_error == "none") {
      last_error = ec.message();
    }
    close(coord_.get());
    drain();
    coord_.reset();
    return std::nullopt;
  }
  // The hello says where this rank takes ring links: on the interface that
  // reaches rank 0.
  if (Status s = open_link_listener(); !s.is_ok()) return s;
  hello_ =
      frame::encode_frame(frame::Type::kHello, frame::encode_hello({rank_, size_, tag_, listen_}));
  start_handshake(coord_);

  bool retry = false;
  Status status = pump(
      deadline,
      [&]() -> std::optional<Status> {
        Conn& c = *coord_;
        events_.clear();
        if (!c.inbox.empty() && c.auth != Auth::kDone) {
          const Frame f = std::move(c.inbox.front());
          c.inbox.pop_front();
          if (auto refused = check_challenge(coord_, f, coordinator_)) return refused;
          return std::nullopt;
        }
        if (!c.inbox.empty() && c.writes == 0) {
          const auto welcome = frame::decode_welcome(c.inbox.front().payload);
          c.inbox.pop_front();
          if (!welcome || welcome->size != size_ || welcome->job_tag != tag_) {
            return error(CHORUS_ERR_INVALID_ARGUMENT, "the coordinator ", coordinator_,
                         " welcomed this rank into a different job (job size or token differ)");
          }
          if (welcome->connect_to.size() != ring_addresses(rank_).size()) {
            return error(CHORUS_ERR_INVALID_ARGUMENT, "the coordinator ", coordinator_, " sent ",
                         welcome->connect_to.size(),
                         " ring-neighbour addresses in its welcome, this rank expects ",
                         ring_addresses(rank_).size());
          }
          connect_to_ = welcome->connect_to;
          return Status::ok();
        }
        if (c.gone == Gone::kAbort && c.abort_code == CHORUS_ERR_INVALID_ARGUMENT) {
          return error(CHORUS_ERR_INVALID_ARGUMENT, "the coordinator ", coordinator_,
                       " refused this rank: ", c.why);
        }
        if (c.gone == Gone::kAbort) return gone_status(c);
        if (c.gone == Gone::kProtocol) {
          return error(CHORUS_ERR_INVALID_ARGUMENT, coordinator_,
                       " does not speak the Chorus side-channel protocol (", c.why,
                       "); is the coordinator address right?");
        }
        if (c.gone == Gone::kIo || !c.write_error.empty()) {
          // Dropped before the welcome: rank 0 may be restarting, or shed us
          // as one of too many unidentified callers. Try again.
          last_error = c.gone == Gone::kIo ? c.why : c.write_error;
          retry = true;
          return Status::ok();
        }
        return std::nullopt;
      },
      [&] {
        return error(CHORUS_ERR_TIMEOUT, "connected to coordinator ", coordinator_,
                     " but rank 0 did not welcome this rank within ",
                     seconds_text(Clock::now() - start),
                     "; rank 0 waits for every rank to join, so some rank is probably missing "
                     "(rank 0's error names it)");
      });
  if (retry) {
    close(coord_.get());
    drain();
    coord_.reset();
    return std::nullopt;
  }
  return status;
}

/// Opens the connecting half of the handshake on a fresh connection to rank 0
/// or to a ring neighbour: starts its reader and sends the auth-init.
void Bootstrap::Impl::start_handshake(const ConnPtr& c) {
  set_cloexec(c->socket.native_handle());
  asio::error_code ignored;
  c->socket.set_option(tcp::no_delay(true), ignored);
  // A welcome is allowed from the start so that the reader never refuses
  // one that follows the challenge closely; the step enforces the order.
  c->allowed =
      bit(frame::Type::kAuthChallenge) | bit(frame::Type::kWelcome) | bit(frame::Type::kAbort);
  read_frames(c);
  frame::AuthInit init;
  c->rank_nonce = auth::random_nonce();
  std::copy(c->rank_nonce.begin(), c->rank_nonce.end(), init.rank_nonce.begin());
  c->auth_frame = frame::encode_frame(frame::Type::kAuthInit, frame::encode_auth_init(init));
  send(c, asio::buffer(c->auth_frame));
}

/// The connecting side of the authentication, towards rank 0 or a ring
/// neighbour (`other` names it): checks the other end's proof and, when it
/// holds, answers with this rank's proof and the hello. Returns the final
/// error when the other end is not of this job, nullopt to go on.
std::optional<Status> Bootstrap::Impl::check_challenge(const ConnPtr& conn, const Frame& f,
                                                       const std::string& other) {
  Conn& c = *conn;
  const bool to_root = conn == coord_;
  const auto challenge = f.type == frame::Type::kAuthChallenge
                             ? frame::decode_auth_challenge(f.payload)
                             : std::nullopt;
  if (!challenge) {
    return error(CHORUS_ERR_INVALID_ARGUMENT, other,
                 " does not speak the Chorus side-channel protocol (expected an auth-challenge, "
                 "got a ",
                 frame::type_name(f.type), " frame)",
                 to_root ? "; is the coordinator address right?" : "");
  }
  std::copy(challenge->root_nonce.begin(), challenge->root_nonce.end(), c.root_nonce.begin());
  const auth::Mac expected = auth::coordinator_proof(token_, c.rank_nonce, c.root_nonce);
  if (!auth::same_mac(challenge->proof, expected)) {
    if (!to_root) {
      return error(CHORUS_ERR_INVALID_ARGUMENT, other,
                   " could not prove it knows this job's token: the address rank 0 gave for "
                   "that ring neighbour is held by a process of another job");
    }
    return error(CHORUS_ERR_INVALID_ARGUMENT, "the coordinator ", other,
                 " could not prove it knows this job's token: the job token differs between "
                 "this rank and rank 0, or another job's rank 0 holds that address. Fix: give "
                 "every rank the same CHORUS_JOB_TOKEN (bootstrap.job_token); chorusrun sets "
                 "one per job, so ranks started by hand, srun or mpirun must export it "
                 "themselves");
  }
  c.auth = Auth::kDone;
  frame::AuthProof proof;
  const auth::Mac mine = auth::rank_proof(token_, c.rank_nonce, c.root_nonce);
  std::copy(mine.begin(), mine.end(), proof.proof.begin());
  c.proof_frame = frame::encode_frame(frame::Type::kAuthProof, frame::encode_auth_proof(proof));
  c.proof_frame.insert(c.proof_frame.end(), hello_.begin(), hello_.end());
  send(conn, asio::buffer(c.proof_frame));
  return std::nullopt;
}

asio::error_code Bootstrap::Impl::connect_once(const std::vector<tcp::endpoint>& endpoints,
                                               Deadline deadline) {
  auto result = std::make_shared<std::optional<asio::error_code>>();
  asio::async_connect(coord_->socket, endpoints,
                      [result](const asio::error_code& ec, const tcp::endpoint&) { *result = ec; });
  const Status waited = pump(
      deadline,
      [&]() -> std::optional<Status> {
        if (*result) return Status::ok();
        return std::nullopt;
      },
      [] { return Status(CHORUS_ERR_TIMEOUT, ""); });
  if (!waited.is_ok()) return asio::error::timed_out;
  return **result;
}

}  // namespace chorus::core
