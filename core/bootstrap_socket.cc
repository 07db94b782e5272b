// Bootstrap I/O: the event loop that runs handlers on the caller's thread,
// the header-first frame reader, shutting down and dropping connections,
// name resolution, and failing the side channel for good.

#include "core/bootstrap_impl.h"

#include <asio/read.hpp>

#include <optional>
#include <utility>

namespace chorus::core {

/// Runs handlers on this thread until `step` returns a status (checked before
/// each handler), or the deadline passes (then `on_timeout`). Callers that
/// have not been admitted yet are served first, so steps never see them.
Status Bootstrap::Impl::pump(Deadline deadline, const Step& step,
                             const std::function<Status()>& on_timeout) {
  for (;;) {
    serve_callers();
    if (auto status = step()) return std::move(*status);
    if (deadline.expired()) return on_timeout();
    if (io_.stopped()) io_.restart();
    const std::size_t ran = deadline.is_never() ? io_.run_one() : io_.run_one_until(deadline.at());
    if (ran == 0 && io_.stopped()) {
      if (auto status = step()) return std::move(*status);
      return error(CHORUS_ERR_INTERNAL, "side channel is waiting with no I/O outstanding");
    }
  }
}

void Bootstrap::Impl::read_frames(const ConnPtr& c) {
  asio::async_read(c->socket, asio::buffer(c->header),
                   [this, c](const asio::error_code& ec, std::size_t) { on_header(c, ec); });
}

void Bootstrap::Impl::on_header(const ConnPtr& c, const asio::error_code& ec) {
  if (c->shut) return;
  if (ec) return mark_gone(c, Gone::kIo, ec.message());
  const frame::Header header = frame::read_header(c->header);
  if (const auto err = frame::check_header(header); err != frame::Error::kNone) {
    return mark_gone(c, Gone::kProtocol, frame::describe(err, header));
  }
  const auto type = static_cast<frame::Type>(header.type);
  if ((c->allowed & bit(type)) == 0) {
    return mark_gone(c, Gone::kProtocol, cat("unexpected ", frame::type_name(type), " frame"));
  }
  c->payload.resize(header.length);  // at most max_payload(type): checked above
  asio::async_read(
      c->socket, asio::buffer(c->payload),
      [this, c, type](const asio::error_code& e, std::size_t) { on_payload(c, type, e); });
}

void Bootstrap::Impl::on_payload(const ConnPtr& c, frame::Type type, const asio::error_code& ec) {
  if (c->shut) return;
  if (ec) return mark_gone(c, Gone::kIo, ec.message());
  if (type == frame::Type::kAbort) {
    auto abort = frame::decode_abort(c->payload);
    if (!abort) return mark_gone(c, Gone::kProtocol, "malformed abort frame");
    c->abort_code = abort->code;
    return mark_gone(c, Gone::kAbort, std::move(abort->text));
  }
  (type == frame::Type::kPass ? c->passes : c->inbox)
      .push_back({type, std::exchange(c->payload, {})});
  events_.push_back(c);
  read_frames(c);
}

void Bootstrap::Impl::write_next(const ConnPtr& c) {
  asio::async_write(c->socket, c->queue.front().buffers,
                    [this, c](const asio::error_code& ec, std::size_t n) {
                      bytes_sent_.fetch_add(n, std::memory_order_relaxed);
                      c->queue.pop_front();
                      --c->writes;
                      --writes_in_flight_;
                      if (ec) {
                        // The rest of the queue cannot follow a broken frame.
                        writes_in_flight_ -= static_cast<int>(c->queue.size());
                        c->writes = 0;
                        c->queue.clear();
                        if (!c->shut && c->write_error.empty()) {
                          c->write_error = ec.message();
                          events_.push_back(c);
                        }
                        return;
                      }
                      if (!c->queue.empty()) write_next(c);
                    });
}

void Bootstrap::Impl::mark_gone(const ConnPtr& c, Gone gone, std::string why) {
  if (c->gone != Gone::kNo) return;
  c->gone = gone;
  c->why = std::move(why);
  events_.push_back(c);
}

// The socket is half-closed, not closed: closing it with unread input would
// send a reset, which can destroy the abort frame before the other end reads
// it. The destructor closes it.
void Bootstrap::Impl::shut_down(Conn& c, const frame::Abort* abort) {
  if (c.shut) return;
  c.shut = true;
  asio::error_code ec;
  if (abort != nullptr && c.writes == 0 && c.gone == Gone::kNo && c.socket.is_open()) {
    // One non-blocking send: the frame is small and nothing else is queued at
    // a frame boundary. A short write leaves a truncated frame, which the
    // other end reports as a lost connection: still the right outcome.
    const Bytes f =
        frame::encode_frame(frame::Type::kAbort, frame::encode_abort(abort->code, abort->text));
    c.socket.non_blocking(true, ec);
    if (!ec) {
      bytes_sent_.fetch_add(c.socket.send(asio::buffer(f), 0, ec), std::memory_order_relaxed);
    }
  }
  c.socket.shutdown(tcp::socket::shutdown_send, ec);
  c.socket.cancel(ec);
}

void Bootstrap::Impl::drop(Conn& c, const frame::Abort* abort) {
  shut_down(c, abort);
  c.pending = false;
  c.handshake_timer.cancel();
  asio::error_code ignored;
  c.socket.close(ignored);
}

void Bootstrap::Impl::close(Conn* c) {
  if (c == nullptr) return;
  c->shut = true;
  c->handshake_timer.cancel();
  asio::error_code ignored;
  c->socket.close(ignored);
}

/// Numeric addresses need no lookup; names go through Asio's resolver thread.
/// getaddrinfo cannot be interrupted: after a timeout the destructor waits for
/// it (bounded by the resolver's own timeouts, see resolv.conf).
asio::error_code Bootstrap::Impl::resolve(Deadline deadline, std::vector<tcp::endpoint>& out) {
  asio::error_code ec;
  const auto address = asio::ip::make_address(host_.host, ec);
  if (!ec) {
    out = {tcp::endpoint(address, host_.port)};
    return {};
  }
  struct Lookup {
    bool done = false;
    asio::error_code ec;
    std::vector<tcp::endpoint> endpoints;
  };
  auto lookup = std::make_shared<Lookup>();
  resolver_.async_resolve(host_.host, std::to_string(host_.port), tcp::resolver::numeric_service,
                          [lookup](const asio::error_code& e, tcp::resolver::results_type results) {
                            lookup->done = true;
                            lookup->ec = e;
                            for (const auto& entry : results) {
                              lookup->endpoints.push_back(entry.endpoint());
                            }
                          });
  const Status waited = pump(
      deadline,
      [&]() -> std::optional<Status> {
        if (lookup->done) return Status::ok();
        return std::nullopt;
      },
      [&] { return Status(CHORUS_ERR_TIMEOUT, ""); });
  if (!waited.is_ok()) {
    resolver_.cancel();
    drain();
    return asio::error::timed_out;
  }
  if (lookup->ec) return lookup->ec;
  if (lookup->endpoints.empty()) return asio::error::host_not_found;
  out = std::move(lookup->endpoints);
  return {};
}

Status Bootstrap::Impl::fail(Status status) {
  if (!failed_.is_ok()) return status;
  failed_ = status;
  log(CHORUS_LOG_ERROR, status.message());
  const frame::Abort abort{status.code(), relay_.empty() ? status.message() : relay_};
  for (const auto* list : {&peers_, &links_}) {
    for (const ConnPtr& c : *list) {
      if (c) shut_down(*c, &abort);
    }
  }
  if (coord_) shut_down(*coord_, &abort);
  for (const ConnPtr& c : pending_) {
    if (c->pending) drop(*c, nullptr);
  }
  pending_.clear();
  asio::error_code ignored;
  acceptor_.close(ignored);
  accept_retry_.cancel();
  resolver_.cancel();
  drain();
  return status;
}

std::string Bootstrap::Impl::who(const Conn& c) const {
  return c.rank == 0 ? cat("the coordinator (rank 0 at ", coordinator_, ")") : cat("rank ", c.rank);
}

Status Bootstrap::Impl::gone_status(const Conn& c) {
  switch (c.gone) {
    case Gone::kAbort:
      relay_ = c.why;
      return error(code_from_abort(c.abort_code), "the job's side channel was aborted: ", c.why);
    case Gone::kProtocol:
      return error(CHORUS_ERR_PEER_LOST, who(c), " broke the side-channel protocol (", c.why, ")");
    case Gone::kIo:
    case Gone::kNo:
      break;
  }
  return error(CHORUS_ERR_PEER_LOST, "lost ", who(c), " on the side channel (", c.why, ")");
}

}  // namespace chorus::core
