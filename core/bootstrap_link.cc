// Ring links: every non-root rank connects to its ring neighbours of higher
// rank and takes the links of those of lower rank (bootstrap_ring.h), right
// after rank 0 has welcomed it. A link runs the same authentication as a
// connection to rank 0 (the connecting half in bootstrap_join.cc, the
// accepting half in bootstrap_root.cc), and the listener lives only while
// the rank joins: strays are refused as at rank 0, later callers find no
// port.

#include "core/bootstrap_impl.h"

#include <asio/connect.hpp>

#include <algorithm>
#include <optional>
#include <utility>

namespace chorus::core {

namespace {

frame::Address to_address(const tcp::endpoint& ep) {
  frame::Address a;
  a.port = ep.port();
  if (ep.address().is_v4()) {
    a.family = 4;
    const auto b = ep.address().to_v4().to_bytes();
    std::copy(b.begin(), b.end(), a.bytes.begin());
  } else {
    a.family = 6;
    const auto b = ep.address().to_v6().to_bytes();
    std::copy(b.begin(), b.end(), a.bytes.begin());
  }
  return a;
}

std::optional<tcp::endpoint> to_endpoint(const frame::Address& a) {
  if (a.port == 0) return std::nullopt;
  if (a.family == 4) {
    asio::ip::address_v4::bytes_type b{};
    std::copy_n(a.bytes.begin(), b.size(), b.begin());
    return tcp::endpoint(asio::ip::address_v4(b), a.port);
  }
  if (a.family == 6) {
    asio::ip::address_v6::bytes_type b{};
    std::copy_n(a.bytes.begin(), b.size(), b.begin());
    return tcp::endpoint(asio::ip::address_v6(b), a.port);
  }
  return std::nullopt;
}

/// `rank`'s ring neighbours, successor first, each once.
std::vector<int> neighbours(int rank, int size) {
  if (!ring::linked(rank, size)) return {};
  const int next = ring::next(rank, size);
  const int prev = ring::prev(rank, size);
  return next == prev ? std::vector<int>{next} : std::vector<int>{next, prev};
}

}  // namespace

/// Rank 0: where the neighbours that `rank` connects to listen, in the order
/// of neighbours(). A non-root rank calls it only for the count.
std::vector<frame::Address> Bootstrap::Impl::ring_addresses(int rank) const {
  std::vector<frame::Address> out;
  for (const int n : neighbours(rank, size_)) {
    if (!ring::connects_to(rank, n)) continue;
    const ConnPtr& c = rank_ == 0 ? peers_[static_cast<std::size_t>(n)] : nullptr;
    out.push_back(c ? c->listen : frame::Address{});
  }
  return out;
}

ConnPtr Bootstrap::Impl::link_to(int peer) const {
  if (peer == 0) return rank_ == 0 ? nullptr : coord_;
  if (rank_ == 0) return peers_[static_cast<std::size_t>(peer)];
  for (const ConnPtr& c : links_) {
    if (c->rank == peer) return c;
  }
  return nullptr;
}

/// A listener on the address this rank reaches rank 0 from, on a port the
/// kernel picks; only ranks that take a link need one.
Status Bootstrap::Impl::open_link_listener() {
  if (!ring::listens(rank_, size_) || acceptor_.is_open()) return Status::ok();
  asio::error_code ec;
  const tcp::endpoint local = coord_->socket.local_endpoint(ec);
  const tcp::endpoint ep(local.address(), 0);
  if (!ec) acceptor_.open(ep.protocol(), ec);
  if (!ec) {
    set_cloexec(acceptor_.native_handle());
    acceptor_.bind(ep, ec);
  }
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  tcp::endpoint bound;
  if (!ec) bound = acceptor_.local_endpoint(ec);
  if (ec) {
    asio::error_code ignored;
    acceptor_.close(ignored);
    return error(CHORUS_ERR_SYSTEM, "cannot listen on ", endpoint_text(ep),
                 " for links from ring neighbours on the side channel (", ec.message(), ")");
  }
  listen_ = to_address(bound);
  log(CHORUS_LOG_DEBUG,
      cat("rank ", rank_, ": listening on ", endpoint_text(bound), " for ring neighbours"));
  accept_next();
  return Status::ok();
}

/// Whether an authenticated caller is a ring neighbour this rank expects.
/// Returns why not, or "" when it is.
std::string Bootstrap::Impl::check_link_hello(const frame::Hello& hello) const {
  if (hello.job_tag != tag_ || hello.size != size_) {
    return cat("it belongs to another job (its job size or launcher's job identity differs: ",
               hello.size, " ranks)");
  }
  const auto ns = neighbours(rank_, size_);
  const bool expected = std::any_of(
      ns.begin(), ns.end(), [&](int n) { return n == hello.rank && ring::connects_to(n, rank_); });
  if (!expected) {
    return cat("it claims rank ", hello.rank, ", which is not a ring neighbour that links to rank ",
               rank_);
  }
  if (link_to(hello.rank)) {
    return cat("it claims rank ", hello.rank, ", whose ring link is already up");
  }
  return {};
}

void Bootstrap::Impl::admit_link(const ConnPtr& c, const frame::Hello& hello) {
  c->rank = hello.rank;
  c->linked = true;
  c->allowed = bit(frame::Type::kPass) | bit(frame::Type::kAbort);
  links_.push_back(c);
  if (welcomes_.empty()) {
    welcomes_.push_back(
        frame::encode_frame(frame::Type::kWelcome, frame::encode_welcome({size_, tag_, {}})));
  }
  send(c, asio::buffer(welcomes_.front()));
  log(CHORUS_LOG_DEBUG,
      cat("rank ", rank_, ": ring link from rank ", c->rank, " (", c->where, ") is up"));
}

void Bootstrap::Impl::connect_link(int peer, const frame::Address& address) {
  auto c = std::make_shared<Conn>(io_);
  c->rank = peer;
  links_.push_back(c);
  const auto ep = to_endpoint(address);
  if (!ep) {
    c->gone = Gone::kProtocol;
    c->why = "rank 0 gave no address for it";
    events_.push_back(c);
    return;
  }
  c->where = endpoint_text(*ep);
  c->socket.async_connect(*ep, [this, c](const asio::error_code& ec) {
    if (c->shut) return;
    if (ec) return mark_gone(c, Gone::kIo, cat("cannot connect: ", ec.message()));
    start_handshake(c);
  });
}

/// Non-root, right after the welcome: links with every ring neighbour.
/// Blocks until each link has authenticated both ways, rank 0 or a
/// neighbour gives up, or the deadline passes.
Status Bootstrap::Impl::link_ring(Deadline deadline, Clock::time_point start) {
  std::vector<int> expected;  // every neighbour, by its rank
  std::size_t a = 0;
  for (const int n : neighbours(rank_, size_)) {
    expected.push_back(n);
    if (ring::connects_to(rank_, n)) connect_link(n, connect_to_.at(a++));
  }
  const auto missing = [&] {
    std::vector<int> out;
    for (const int n : expected) {
      const ConnPtr c = link_to(n);
      if (!c || !c->linked) out.push_back(n);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  Status status = pump(
      deadline,
      [&]() -> std::optional<Status> {
        for (const ConnPtr& c : std::exchange(events_, {})) {
          if (c == coord_) {
            if (c->gone != Gone::kNo) return gone_status(*c);
            continue;
          }
          if (c->gone == Gone::kAbort) return gone_status(*c);
          if (!c->linked && !c->inbox.empty()) {
            const Frame f = std::move(c->inbox.front());
            c->inbox.pop_front();
            const std::string other = cat("rank ", c->rank, " at ", c->where);
            if (c->auth != Auth::kDone) {
              if (auto refused = check_challenge(c, f, other)) return refused;
            } else if (f.type == frame::Type::kWelcome) {
              c->linked = true;
              c->allowed = bit(frame::Type::kPass) | bit(frame::Type::kAbort);
              log(CHORUS_LOG_DEBUG,
                  cat("rank ", rank_, ": ring link to rank ", c->rank, " (", c->where, ") is up"));
            }
          }
          if (c->gone != Gone::kNo || !c->write_error.empty()) {
            return error(CHORUS_ERR_PEER_LOST, "cannot link with ring neighbour rank ", c->rank,
                         c->where.empty() ? "" : " at " + c->where, " on the side channel (",
                         c->gone != Gone::kNo ? c->why : c->write_error, ")");
          }
        }
        if (missing().empty() && writes_in_flight_ == 0) return Status::ok();
        return std::nullopt;
      },
      [&] {
        return error(CHORUS_ERR_TIMEOUT, "timed out after ", seconds_text(Clock::now() - start),
                     " linking with ring neighbour ", ranks_text(missing()),
                     " on the side channel (it joined rank 0, so it has not linked back: "
                     "stalled, or its address is not reachable from here?)");
      });
  drop_callers();
  return status;
}

}  // namespace chorus::core
