// Bootstrap side channel over standalone Asio; see bootstrap.h.
//
// Concurrency: each Bootstrap owns an io_context that runs only inside its own
// calls, on the caller's thread (Impl::pump). Handlers therefore never run at
// the same time as the code that inspects the state they update, and no
// handler runs after a call returns: a call either completes all the I/O it
// started, or fails, and failing shuts the sockets down and drains the
// handlers (Impl::fail).
//
// Reading: every connection always has a read posted (Impl::read_frames). It
// reads the 12-byte header, validates it (frame::check_header, then the frame
// types that this peer may send at all) and only then sizes the payload
// buffer, so nobody can make us allocate more than max_payload(type) bytes,
// and an unidentified caller no more than a hello. Complete frames go to the
// connection's inbox; an abort frame, an I/O error or a protocol error marks
// the connection gone and stops its reader. Either way the connection is put
// on events_, which the waiting code scans instead of every connection.

#include "core/bootstrap.h"

#include "core/auth.h"
#include "core/late_arrivals.h"

#include <fcntl.h>

#include <asio/connect.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <deque>
#include <exception>
#include <new>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

namespace chorus::core {
namespace {

using asio::ip::tcp;
using Bytes = std::vector<std::byte>;
using Clock = std::chrono::steady_clock;

/// One connect attempt is abandoned (and retried) after this long, so a SYN
/// lost to a host that was not up yet does not use up the whole deadline.
constexpr auto kConnectAttempt = std::chrono::seconds(5);
/// Pause between connect attempts: starts short, grows to kRetryMax.
constexpr auto kRetryFirst = std::chrono::milliseconds(50);
constexpr auto kRetryMax = std::chrono::milliseconds(250);
/// Connections rank 0 holds that have not said hello yet; a new one beyond
/// this evicts the oldest (a real rank says hello at once).
constexpr std::size_t kMaxPending = 256;
/// A caller has this long from its connect to a hello that rank 0 accepts
/// (authentication included); a real rank needs one round trip.
constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
/// Once rank 0 knows that a second job shares its port (and neither a token
/// nor a launcher's job identity tells the jobs apart), it refuses every
/// caller with the reason for this long, or until its init deadline, before
/// it fails: ranks of both jobs that are on their way get the reason instead
/// of a closed port.
constexpr auto kContestedLinger = std::chrono::seconds(10);
/// How long a rank 0 that cannot listen (the port is taken) spends telling
/// the holder that a second job is starting on its port.
constexpr auto kCollisionNotice = std::chrono::seconds(2);
/// Cause and fix for every refusal that two jobs on one port can explain.
constexpr const char* kTwoJobsFix =
    "two jobs were started on one coordinator port, or a stale rank of an earlier run is still "
    "running. Fix: give each job its own port (CHORUS_COORDINATOR, MASTER_PORT), or a job token "
    "(CHORUS_JOB_TOKEN, the same on every rank of one job; chorusrun sets one)";
/// Longest piece of a stranger's abort text that rank 0 copies into its log.
constexpr std::size_t kMaxQuotedText = 300;

template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

std::string seconds_text(Clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), s < 10 ? "%.1f s" : "%.0f s", s);
  return buf.data();
}

/// "2, 3, 7-12" for ascending ranks; long lists are cut.
std::string rank_list(const std::vector<int>& ranks) {
  constexpr int kMaxItems = 32;
  std::string out;
  int items = 0;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (items == kMaxItems) {
      out += cat(", ... (", ranks.size() - i, " more)");
      break;
    }
    if (!out.empty()) out += ", ";
    if (j - i >= 2) {
      out += cat(ranks[i], "-", ranks[j]);
    } else {
      out += std::to_string(ranks[i]);
      if (j > i) out += cat(", ", ranks[j]);
    }
    ++items;
    i = j + 1;
  }
  return out;
}

std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

std::string endpoint_text(const tcp::endpoint& ep) {
  const auto address = ep.address();
  return address.is_v6() ? cat("[", address.to_string(), "]:", ep.port())
                         : cat(address.to_string(), ":", ep.port());
}

/// Keeps side-channel sockets out of processes the host program spawns.
void set_cloexec(int fd) {
  if (fd < 0) return;
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

constexpr std::uint32_t bit(frame::Type type) { return 1u << static_cast<unsigned>(type); }

/// What an abort from elsewhere means here: a job-wide usage error stays one;
/// anything else means this rank has lost its job.
int code_from_abort(int code) {
  return code == CHORUS_ERR_INVALID_ARGUMENT ? code : CHORUS_ERR_PEER_LOST;
}

enum class Gone : std::uint8_t { kNo, kIo, kProtocol, kAbort };

/// Where a connection is in the authentication exchange (frame.h).
enum class Auth : std::uint8_t { kNew, kChallenged, kDone };

/// Text from an unauthenticated peer, made safe for a one-line log entry.
std::string quoted(std::string_view text) {
  std::string out;
  for (const char ch : text.substr(0, std::min(text.size(), kMaxQuotedText))) {
    const auto u = static_cast<unsigned char>(ch);
    out += (u < 0x20 || u == 0x7f) ? '?' : ch;
  }
  if (text.size() > kMaxQuotedText) out += "...";
  return out;
}

struct Frame {
  frame::Type type;
  Bytes payload;
};

/// One TCP connection: on rank 0 one per peer (and one per caller that has
/// not said hello yet), on the others one to rank 0.
struct Conn {
  explicit Conn(asio::io_context& io) : socket(io), handshake_timer(io) {}
  tcp::socket socket;
  asio::steady_timer handshake_timer;  ///< rank 0: bounds a pending caller's handshake
  Auth auth = Auth::kNew;
  auth::Nonce rank_nonce{};  ///< the connecting rank's nonce
  auth::Nonce root_nonce{};  ///< rank 0's nonce
  Bytes auth_frame;          ///< an authentication frame being written
  std::string where;          ///< the other end, for messages
  int rank = -1;              ///< the other end's rank once known
  bool pending = false;       ///< rank 0: accepted, no hello yet
  std::uint32_t allowed = 0;  ///< bit(type) for every frame type the other end may send
  std::array<std::byte, frame::kHeaderSize> header{};
  Bytes payload;            ///< the frame being read
  std::deque<Frame> inbox;  ///< complete frames not yet consumed
  int writes = 0;           ///< our async writes in flight
  std::string write_error;  ///< the first failed write
  Gone gone = Gone::kNo;    ///< the reader has stopped, and why
  std::string why;          ///< kIo/kProtocol: reason; kAbort: the other end's text
  int abort_code = 0;
  bool shut = false;  ///< we stopped all I/O on it; its handlers change nothing
};
using ConnPtr = std::shared_ptr<Conn>;

}  // namespace

class Bootstrap::Impl {
 public:
  Impl(const BootstrapOptions& options, HostPort host)
      : rank_(options.rank),
        size_(options.size),
        coordinator_(options.coordinator),
        host_(std::move(host)),
        token_(options.job_token),
        identity_(options.job_identity),
        tag_(frame::job_tag(options.job_identity.empty()
                                ? options.job_token
                                : options.job_token + '\x1f' + options.job_identity)),
        log_(options.log) {}

  ~Impl() {
    late_.reset();
    asio::error_code ignored;
    acceptor_.close(ignored);
    resolver_.cancel();
    for (auto* list : {&peers_, &pending_}) {
      for (const ConnPtr& c : *list) close(c.get());
    }
    close(coord_.get());
    try {
      accept_retry_.cancel();
      drain();
    } catch (...) {  // NOLINT(bugprone-empty-catch): nothing left to report to
    }
  }

  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  Status join_as_root(Deadline deadline);
  Status join_as_peer(Deadline deadline);
  Status collective(frame::Op op, int root, std::span<const std::byte> mine,
                    std::vector<Bytes>& out, Deadline deadline);

  /// Makes `status` final: logs it, sends an abort to every connection that
  /// is at a frame boundary (rank 0 relays it to everyone), stops all I/O and
  /// drains the handlers. Returns `status`.
  Status fail(Status status);

 private:
  using Step = std::function<std::optional<Status>()>;

  template <class... Args>
  Status error(int code, const Args&... args) const {
    return {code, cat("rank ", rank_, ": ", args...)};
  }

  /// The host's logger adds the rank itself, so our "rank N: " prefix (which
  /// Status messages keep) is left out of log lines.
  void log(int level, const std::string& message) const {
    if (!log_) return;
    try {
      const std::string prefix = cat("rank ", rank_, ": ");
      log_(level, message.starts_with(prefix) ? message.substr(prefix.size()) : message);
    } catch (...) {  // NOLINT(bugprone-empty-catch): a throwing logger must not break the job
    }
  }

  Status pump(Deadline deadline, const Step& step, const std::function<Status()>& on_timeout);
  void drain() {
    io_.restart();
    io_.poll();
  }

  // I/O primitives.
  void read_frames(const ConnPtr& c);
  void on_header(const ConnPtr& c, const asio::error_code& ec);
  void on_payload(const ConnPtr& c, frame::Type type, const asio::error_code& ec);
  void mark_gone(const ConnPtr& c, Gone gone, std::string why);
  template <class Buffers>
  void send(const ConnPtr& c, const Buffers& buffers);
  void shut_down(Conn& c, const frame::Abort* abort);
  void drop(Conn& c, const frame::Abort* abort);
  static void close(Conn* c);
  asio::error_code resolve(Deadline deadline, std::vector<tcp::endpoint>& out);

  // Joining.
  Status listen(const std::vector<tcp::endpoint>& endpoints);
  void accept_next();
  std::optional<Status> join_step();
  void handshake_step(const ConnPtr& c);
  void refuse(const ConnPtr& c, const std::string& why, bool tell);
  void admit(const ConnPtr& c, const Frame& hello_frame);
  std::optional<Status> check_challenge(const Frame& f);
  std::string check_hello(const frame::Hello& hello, const Conn& c);
  void contest(const std::string& why);
  void refuse_late_callers();
  void announce_collision(Deadline deadline);
  std::optional<Status> try_join(Deadline deadline, Clock::time_point start,
                                 std::string& last_error);
  asio::error_code connect_once(const std::vector<tcp::endpoint>& endpoints, Deadline deadline);

  // Collectives.
  Status root_collective(frame::Op op, int root, std::span<const std::byte> mine,
                         std::vector<Bytes>& out, Deadline deadline);
  Status peer_collective(frame::Op op, int root, std::span<const std::byte> mine,
                         std::vector<Bytes>& out, Deadline deadline);
  std::string who(const Conn& c) const;
  Status gone_status(const Conn& c);

  const int rank_;
  const int size_;
  const std::string coordinator_;  ///< as configured, for messages
  const HostPort host_;
  const std::string token_;  ///< the job token: HMAC key, never sent
  const std::string identity_;  ///< the launcher's job identity, may be empty
  /// job_tag of the token and the identity: what a hello and a welcome carry.
  const std::uint64_t tag_;
  const std::function<void(int, const std::string&)> log_;

  // io_ comes first so that everything bound to it is destroyed before it.
  asio::io_context io_{1};
  tcp::acceptor acceptor_{io_};
  asio::steady_timer accept_retry_{io_};
  tcp::resolver resolver_{io_};
  asio::steady_timer contested_timer_{io_};
  /// rank 0 after the join: owns the listening socket, refuses late callers.
  std::unique_ptr<LateArrivals> late_;
  /// rank 0: why this job cannot tell its ranks from another job's, once known.
  std::string contested_;
  Clock::time_point contested_until_{};
  Deadline join_deadline_ = Deadline::never();
  bool port_taken_ = false;  ///< rank 0: listen found the port in use

  std::vector<ConnPtr> peers_;    ///< rank 0: peers_[r] for 1 <= r < size, null until joined
  std::vector<ConnPtr> pending_;  ///< rank 0 while joining: callers without a hello yet
  int joined_ = 0;
  ConnPtr coord_;                ///< non-root: the connection to rank 0
  std::vector<ConnPtr> events_;  ///< connections that got a frame, went away or failed a write
  int writes_in_flight_ = 0;

  std::uint64_t seq_ = 0;  ///< collectives started, on every rank the same
  Status failed_;          ///< the final error, once there is one
  std::string relay_;      ///< text of an abort to pass on unchanged, if that is what failed us

  // Frames being written; they live here until the write completes or fails.
  Bytes auth_init_;
  Bytes proof_and_hello_;
  Bytes hello_;
  Bytes welcome_;
  std::array<std::byte, frame::kHeaderSize + frame::kOpHeaderSize> contribution_head_{};
  std::vector<std::array<std::byte, frame::kHeaderSize + frame::kOpHeaderSize>> delivery_heads_;
  std::vector<asio::const_buffer> delivery_buffers_;
};

// ---------------------------------------------------------------------------
// Event loop and I/O primitives
// ---------------------------------------------------------------------------

/// Runs handlers on this thread until `step` returns a status (checked before
/// each handler), or the deadline passes (then `on_timeout`).
Status Bootstrap::Impl::pump(Deadline deadline, const Step& step,
                             const std::function<Status()>& on_timeout) {
  for (;;) {
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
  c->inbox.push_back({type, std::exchange(c->payload, {})});
  events_.push_back(c);
  read_frames(c);
}

void Bootstrap::Impl::mark_gone(const ConnPtr& c, Gone gone, std::string why) {
  if (c->gone != Gone::kNo) return;
  c->gone = gone;
  c->why = std::move(why);
  events_.push_back(c);
}

template <class Buffers>
void Bootstrap::Impl::send(const ConnPtr& c, const Buffers& buffers) {
  ++c->writes;
  ++writes_in_flight_;
  asio::async_write(c->socket, buffers, [this, c](const asio::error_code& ec, std::size_t) {
    --c->writes;
    --writes_in_flight_;
    if (ec && !c->shut && c->write_error.empty()) {
      c->write_error = ec.message();
      events_.push_back(c);
    }
  });
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
    if (!ec) c.socket.send(asio::buffer(f), 0, ec);
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

// ---------------------------------------------------------------------------
// Failure
// ---------------------------------------------------------------------------

Status Bootstrap::Impl::fail(Status status) {
  if (!failed_.is_ok()) return status;
  failed_ = status;
  log(CHORUS_LOG_ERROR, status.message());
  const frame::Abort abort{status.code(), relay_.empty() ? status.message() : relay_};
  for (const ConnPtr& c : peers_) {
    if (c) shut_down(*c, &abort);
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

// ---------------------------------------------------------------------------
// Joining: rank 0
// ---------------------------------------------------------------------------

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
  if (status.is_ok()) refuse_late_callers();
  asio::error_code ignored;
  acceptor_.close(ignored);
  accept_retry_.cancel();
  contested_timer_.cancel();
  for (const ConnPtr& c : pending_) {
    if (!c->pending) continue;  // admitted (now in peers_) or dropped already
    log(CHORUS_LOG_WARN,
        cat("rank 0: dropped a connection from ", c->where, " that never said hello"));
    drop(*c, nullptr);
  }
  pending_.clear();
  // Events of dropped callers (a failed challenge write) are not the job's.
  std::erase_if(events_, [](const ConnPtr& c) { return c->shut; });
  if (!status.is_ok()) return fail(std::move(status));

  welcome_ = frame::encode_frame(frame::Type::kWelcome, frame::encode_welcome({size_, tag_}));
  for (int r = 1; r < size_; ++r) {
    const ConnPtr& c = peers_[static_cast<std::size_t>(r)];
    c->allowed = bit(frame::Type::kContribute) | bit(frame::Type::kAbort);
    send(c, asio::buffer(welcome_));
  }
  status = pump(
      deadline,
      [this]() -> std::optional<Status> {
        for (const ConnPtr& c : std::exchange(events_, {})) {
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
      log(CHORUS_LOG_WARN,
          cat("rank 0: accepting on the side channel failed (", ec.message(), "); retrying"));
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
      log(CHORUS_LOG_WARN, cat("rank 0: more than ", kMaxPending,
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

std::optional<Status> Bootstrap::Impl::join_step() {
  for (const ConnPtr& c : std::exchange(events_, {})) {
    if (c->shut) continue;
    if (c->pending) {
      while (c->pending && !c->inbox.empty()) handshake_step(c);
      if (c->pending && c->gone == Gone::kAbort) {
        log(CHORUS_LOG_WARN, cat("rank 0: dropped a connection from ", c->where,
                                 ": it gave up during the handshake (", quoted(c->why), ")"));
        drop(*c, nullptr);
      } else if (c->pending && c->gone != Gone::kNo) {
        log(CHORUS_LOG_WARN, cat("rank 0: dropped a connection from ", c->where, " before ",
                                 c->auth == Auth::kDone ? "it said hello" : "it authenticated",
                                 " (", c->why, ")"));
        drop(*c, nullptr);
      }
    } else if (c->rank > 0 && peers_[static_cast<std::size_t>(c->rank)] == c &&
               c->gone != Gone::kNo) {
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
  const std::string text = cat("rank 0: refused a connection from ", c->where, ": ", why);
  log(CHORUS_LOG_WARN, text);
  const frame::Abort abort{CHORUS_ERR_INVALID_ARGUMENT, text};
  drop(*c, tell ? &abort : nullptr);
}

void Bootstrap::Impl::admit(const ConnPtr& c, const Frame& hello_frame) {
  const auto hello = frame::decode_hello(hello_frame.payload);
  const std::string why = hello ? check_hello(*hello, *c) : std::string("malformed hello");
  if (!why.empty()) return refuse(c, why, true);
  c->pending = false;
  c->handshake_timer.cancel();
  c->rank = hello->rank;
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

// ---------------------------------------------------------------------------
// Joining: other ranks
// ---------------------------------------------------------------------------

Status Bootstrap::Impl::join_as_peer(Deadline deadline) {
  const auto start = Clock::now();
  hello_ = frame::encode_frame(frame::Type::kHello, frame::encode_hello({rank_, size_, tag_}));
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
      log(CHORUS_LOG_DEBUG, cat("rank ", rank_, ": joined the side channel at ", coordinator_));
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
  set_cloexec(coord_->socket.native_handle());
  asio::error_code ignored;
  coord_->socket.set_option(tcp::no_delay(true), ignored);
  // A welcome is allowed from the start so that the reader never refuses
  // one that follows the challenge closely; the step enforces the order.
  coord_->allowed =
      bit(frame::Type::kAuthChallenge) | bit(frame::Type::kWelcome) | bit(frame::Type::kAbort);
  read_frames(coord_);
  frame::AuthInit init;
  coord_->rank_nonce = auth::random_nonce();
  std::copy(coord_->rank_nonce.begin(), coord_->rank_nonce.end(), init.rank_nonce.begin());
  auth_init_ = frame::encode_frame(frame::Type::kAuthInit, frame::encode_auth_init(init));
  send(coord_, asio::buffer(auth_init_));

  bool retry = false;
  Status status = pump(
      deadline,
      [&]() -> std::optional<Status> {
        Conn& c = *coord_;
        events_.clear();
        if (!c.inbox.empty() && c.auth != Auth::kDone) {
          const Frame f = std::move(c.inbox.front());
          c.inbox.pop_front();
          if (auto refused = check_challenge(f)) return refused;
          return std::nullopt;
        }
        if (!c.inbox.empty() && c.writes == 0) {
          const auto welcome = frame::decode_welcome(c.inbox.front().payload);
          c.inbox.pop_front();
          if (!welcome || welcome->size != size_ || welcome->job_tag != tag_) {
            return error(CHORUS_ERR_INVALID_ARGUMENT, "the coordinator ", coordinator_,
                         " welcomed this rank into a different job (job size or token differ)");
          }
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

/// The rank's side of the authentication: checks rank 0's proof and, when it
/// holds, answers with this rank's proof and the hello. Returns the final
/// error when rank 0 is not of this job, nullopt to go on.
std::optional<Status> Bootstrap::Impl::check_challenge(const Frame& f) {
  Conn& c = *coord_;
  const auto challenge =
      f.type == frame::Type::kAuthChallenge ? frame::decode_auth_challenge(f.payload) : std::nullopt;
  if (!challenge) {
    return error(CHORUS_ERR_INVALID_ARGUMENT, coordinator_,
                 " does not speak the Chorus side-channel protocol (expected an auth-challenge, "
                 "got a ", frame::type_name(f.type), " frame); is the coordinator address right?");
  }
  std::copy(challenge->root_nonce.begin(), challenge->root_nonce.end(), c.root_nonce.begin());
  const auth::Mac expected = auth::coordinator_proof(token_, c.rank_nonce, c.root_nonce);
  if (!auth::same_mac(challenge->proof, expected)) {
    return error(CHORUS_ERR_INVALID_ARGUMENT, "the coordinator ", coordinator_,
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
  proof_and_hello_ = frame::encode_frame(frame::Type::kAuthProof, frame::encode_auth_proof(proof));
  proof_and_hello_.insert(proof_and_hello_.end(), hello_.begin(), hello_.end());
  send(coord_, asio::buffer(proof_and_hello_));
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

// ---------------------------------------------------------------------------
// Collectives
// ---------------------------------------------------------------------------

namespace {

std::string call_text(frame::Op op, int root) {
  if (op == frame::Op::kBroadcast) return cat("broadcast(root ", root, ")");
  return frame::op_name(op);
}

}  // namespace

Status Bootstrap::Impl::collective(frame::Op op, int root, std::span<const std::byte> mine,
                                   std::vector<Bytes>& out, Deadline deadline) {
  if (!failed_.is_ok()) {
    return failed_.with_context(cat("rank ", rank_, ": ", frame::op_name(op),
                                    ": side channel unusable after an earlier error"));
  }
  ++seq_;
  if (mine.size() > kMaxBlob) {
    return fail(error(CHORUS_ERR_INVALID_ARGUMENT, frame::op_name(op), ": a ", mine.size(),
                      "-byte blob exceeds the side channel's limit of ", kMaxBlob, " bytes"));
  }
  if (op == frame::Op::kBroadcast && (root < 0 || root >= size_)) {
    return fail(
        error(CHORUS_ERR_INVALID_ARGUMENT, "broadcast: root ", root, " is outside 0..", size_ - 1));
  }
  if (size_ == 1) {
    out.clear();
    if (op != frame::Op::kBarrier) out.emplace_back(mine.begin(), mine.end());
    return Status::ok();
  }
  return rank_ == 0 ? root_collective(op, root, mine, out, deadline)
                    : peer_collective(op, root, mine, out, deadline);
}

Status Bootstrap::Impl::root_collective(frame::Op op, int root, std::span<const std::byte> mine,
                                        std::vector<Bytes>& out, Deadline deadline) {
  const auto start = Clock::now();
  const auto n = static_cast<std::size_t>(size_);
  // A peer that left or aborted since the last call without contributing to
  // this one fails it at once; one that contributed and then left got what it
  // needed from the last call, and fails the next.
  events_.clear();
  for (std::size_t r = 1; r < n; ++r) {
    const Conn& c = *peers_[r];
    if (c.inbox.empty() && c.gone != Gone::kNo) return fail(gone_status(c));
  }

  // Phase 1: a contribution from every peer.
  std::size_t next = 1;  // peers below `next` have contributed
  Status status = pump(
      deadline,
      [&]() -> std::optional<Status> {
        while (next < n && !peers_[next]->inbox.empty()) ++next;
        if (next == n) return Status::ok();
        for (const ConnPtr& c : std::exchange(events_, {})) {
          if (c->inbox.empty() && c->gone != Gone::kNo) return gone_status(*c);
        }
        return std::nullopt;
      },
      [&] {
        std::vector<int> missing;
        for (std::size_t r = 1; r < n; ++r) {
          if (peers_[r]->inbox.empty()) missing.push_back(static_cast<int>(r));
        }
        return error(CHORUS_ERR_TIMEOUT, frame::op_name(op), " #", seq_, " timed out after ",
                     seconds_text(Clock::now() - start), " waiting for ", ranks_text(missing),
                     " (no contribution yet: not called there, or stalled?)");
      });
  if (!status.is_ok()) return fail(std::move(status));

  std::vector<Bytes> got(n);
  got[0].assign(mine.begin(), mine.end());
  for (std::size_t r = 1; r < n; ++r) {
    Frame f = std::move(peers_[r]->inbox.front());
    peers_[r]->inbox.pop_front();
    const auto head =
        f.type == frame::Type::kContribute ? frame::decode_op(f.payload) : std::nullopt;
    if (!head) {
      return fail(error(CHORUS_ERR_PEER_LOST, "rank ", r, " broke the side-channel protocol (",
                        "malformed ", frame::type_name(f.type), " frame during ",
                        frame::op_name(op), ")"));
    }
    if (head->seq != seq_ || head->op != op || (op == frame::Op::kBroadcast && head->arg != root)) {
      return fail(error(CHORUS_ERR_INVALID_ARGUMENT,
                        "side-channel collectives called out of step: call #", seq_, " is ",
                        call_text(op, root), " on rank 0 but call #", head->seq, " on rank ", r,
                        " is ", call_text(head->op, head->arg)));
    }
    f.payload.erase(f.payload.begin(),
                    f.payload.begin() + static_cast<std::ptrdiff_t>(frame::kOpHeaderSize));
    got[r] = std::move(f.payload);
  }

  // Phase 2: the result to every peer: all blobs, the root's blob, or one
  // empty frame for a barrier. Each peer's bytes go straight from `got`.
  std::vector<std::size_t> items;
  if (op == frame::Op::kAllGather) {
    for (std::size_t r = 0; r < n; ++r) items.push_back(r);
  } else {
    items.push_back(op == frame::Op::kBroadcast ? static_cast<std::size_t>(root) : 0);
  }
  delivery_heads_.resize(items.size());
  // One buffer list for all peers: each write holds a span of it, not a copy.
  std::vector<asio::const_buffer>& buffers = delivery_buffers_;
  buffers.clear();
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::size_t blob = op == frame::Op::kBarrier ? 0 : got[items[i]].size();
    auto& head = delivery_heads_[i];
    const auto frame_head = frame::encode_header(
        frame::Type::kDeliver, static_cast<std::uint32_t>(frame::kOpHeaderSize + blob));
    const auto op_head = frame::encode_op({seq_, op, static_cast<std::int32_t>(items[i])});
    std::copy(frame_head.begin(), frame_head.end(), head.begin());
    std::copy(op_head.begin(), op_head.end(), head.begin() + frame::kHeaderSize);
    buffers.emplace_back(asio::buffer(head));
    if (blob > 0) buffers.emplace_back(asio::buffer(got[items[i]]));
  }
  for (std::size_t r = 1; r < n; ++r) send(peers_[r], std::span<const asio::const_buffer>(buffers));
  status = pump(
      deadline,
      [&]() -> std::optional<Status> {
        // Only failed writes count here: a peer that has read its result may
        // close at once, which is no error of this call.
        for (const ConnPtr& c : std::exchange(events_, {})) {
          if (!c->write_error.empty()) {
            return error(CHORUS_ERR_PEER_LOST, "lost rank ", c->rank, " while sending it the ",
                         frame::op_name(op), " result (", c->write_error, ")");
          }
        }
        if (writes_in_flight_ == 0) return Status::ok();
        return std::nullopt;
      },
      [&] {
        std::vector<int> slow;
        for (std::size_t r = 1; r < n; ++r) {
          if (peers_[r]->writes > 0) slow.push_back(static_cast<int>(r));
        }
        return error(CHORUS_ERR_TIMEOUT, frame::op_name(op), " #", seq_, " timed out after ",
                     seconds_text(Clock::now() - start), " sending the result to ",
                     ranks_text(slow), " (not reading?)");
      });
  if (!status.is_ok()) return fail(std::move(status));

  out.clear();
  if (op == frame::Op::kAllGather) {
    out = std::move(got);
  } else if (op == frame::Op::kBroadcast) {
    out.push_back(std::move(got[static_cast<std::size_t>(root)]));
  }
  return Status::ok();
}

Status Bootstrap::Impl::peer_collective(frame::Op op, int root, std::span<const std::byte> mine,
                                        std::vector<Bytes>& out, Deadline deadline) {
  const auto start = Clock::now();
  Conn& c = *coord_;
  const auto frame_head = frame::encode_header(
      frame::Type::kContribute, static_cast<std::uint32_t>(frame::kOpHeaderSize + mine.size()));
  const auto op_head = frame::encode_op({seq_, op, root});
  std::copy(frame_head.begin(), frame_head.end(), contribution_head_.begin());
  std::copy(op_head.begin(), op_head.end(), contribution_head_.begin() + frame::kHeaderSize);
  const std::array<asio::const_buffer, 2> buffers{asio::buffer(contribution_head_),
                                                  asio::buffer(mine.data(), mine.size())};
  if (c.gone == Gone::kNo) send(coord_, buffers);

  const std::size_t expected = op == frame::Op::kAllGather ? static_cast<std::size_t>(size_) : 1;
  Status status = pump(
      deadline,
      [&]() -> std::optional<Status> {
        events_.clear();
        if (c.inbox.size() >= expected && c.writes == 0) return Status::ok();
        if (c.inbox.size() < expected && c.gone != Gone::kNo) return gone_status(c);
        if (!c.write_error.empty()) {
          return error(CHORUS_ERR_PEER_LOST, "lost ", who(c), " on the side channel (",
                       c.write_error, ")");
        }
        return std::nullopt;
      },
      [&] {
        return error(CHORUS_ERR_TIMEOUT, frame::op_name(op), " #", seq_, " timed out after ",
                     seconds_text(Clock::now() - start), " waiting for rank 0 (coordinator ",
                     coordinator_, ") with ", c.inbox.size(), " of ", expected,
                     " result frames received; rank 0 waits for every rank to call it");
      });
  if (!status.is_ok()) return fail(std::move(status));

  std::vector<Bytes> got;
  got.reserve(expected);
  for (std::size_t k = 0; k < expected; ++k) {
    Frame f = std::move(c.inbox.front());
    c.inbox.pop_front();
    const auto head = frame::decode_op(f.payload);
    const int index = op == frame::Op::kAllGather   ? static_cast<int>(k)
                      : op == frame::Op::kBroadcast ? root
                                                    : 0;
    if (!head || head->seq != seq_ || head->op != op || head->arg != index) {
      return fail(error(CHORUS_ERR_PEER_LOST, who(c),
                        " broke the side-channel protocol (unexpected result frame for ",
                        frame::op_name(op), " #", seq_, ")"));
    }
    f.payload.erase(f.payload.begin(),
                    f.payload.begin() + static_cast<std::ptrdiff_t>(frame::kOpHeaderSize));
    got.push_back(std::move(f.payload));
  }
  out = std::move(got);
  return Status::ok();
}

// ---------------------------------------------------------------------------
// Public surface: validation and the exception fence
// ---------------------------------------------------------------------------

namespace {

/// Runs `body`, turning any exception into a Status (and, through `impl`, a
/// final failure of the side channel).
template <class Impl, class Body>
Status fenced(Impl* impl, const char* what, Body&& body) {
  std::string reason;
  int code = CHORUS_ERR_INTERNAL;
  try {
    return body();
  } catch (const std::bad_alloc&) {
    code = CHORUS_ERR_SYSTEM;
    reason = "out of memory";
  } catch (const std::exception& e) {
    reason = e.what();
  } catch (...) {
    reason = "unknown exception";
  }
  try {
    Status status(code, cat("rank ", impl != nullptr ? impl->rank() : -1, ": bootstrap ", what,
                            ": ", reason));
    return impl != nullptr ? impl->fail(std::move(status)) : status;
  } catch (...) {
    return {code, "bootstrap: out of memory while reporting an error"};
  }
}

}  // namespace

Result<HostPort> parse_host_port(std::string_view text) {
  const auto bad = [text](std::string_view why) {
    return Status(CHORUS_ERR_INVALID_ARGUMENT,
                  cat("coordinator address '", text, "' ", why,
                      "; expected host:port, e.g. 10.0.0.1:29500, [fe80::1]:29500 or "
                      "node01:29500"));
  };
  std::string_view host;
  std::string_view port;
  if (text.starts_with('[')) {
    const auto close = text.find(']');
    if (close == std::string_view::npos) return bad("has no closing ']'");
    host = text.substr(1, close - 1);
    const auto rest = text.substr(close + 1);
    if (!rest.starts_with(':')) return bad("has no ':port' after the IPv6 address");
    port = rest.substr(1);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("has no port");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return bad("looks like an IPv6 address without brackets; write [address]:port");
    }
  }
  if (host.empty()) return bad("has no host");
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value < 1 ||
      value > 65535) {
    return bad("has no valid port (1-65535)");
  }
  return HostPort{std::string(host), static_cast<std::uint16_t>(value)};
}

Result<std::unique_ptr<Bootstrap>> Bootstrap::connect(const BootstrapOptions& options,
                                                      Deadline deadline) {
  std::unique_ptr<Impl> impl;
  Status status = fenced(static_cast<Impl*>(nullptr), "connect", [&]() -> Status {
    if (options.size < 1) {
      return {CHORUS_ERR_INVALID_ARGUMENT,
              cat("bootstrap: the job size must be at least 1 (got ", options.size, ")")};
    }
    if (options.rank < 0 || options.rank >= options.size) {
      return {CHORUS_ERR_INVALID_ARGUMENT,
              cat("bootstrap: rank ", options.rank, " is outside 0..", options.size - 1,
                  " for a job of ", options.size, " ranks")};
    }
    HostPort host;
    if (options.size > 1) {
      auto parsed = parse_host_port(options.coordinator);
      if (!parsed.is_ok()) {
        return parsed.status().with_context(cat("rank ", options.rank, ": bootstrap"));
      }
      host = std::move(parsed).value();
    }
    impl = std::make_unique<Impl>(options, std::move(host));
    if (options.size == 1) return Status::ok();
    return fenced(impl.get(), "connect", [&] {
      return options.rank == 0 ? impl->join_as_root(deadline) : impl->join_as_peer(deadline);
    });
  });
  if (!status.is_ok()) return status;
  return std::unique_ptr<Bootstrap>(new Bootstrap(std::move(impl)));
}

Bootstrap::Bootstrap(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Bootstrap::~Bootstrap() = default;

int Bootstrap::rank() const { return impl_->rank(); }

int Bootstrap::size() const { return impl_->size(); }

Status Bootstrap::all_gather(std::span<const std::byte> mine,
                             std::vector<std::vector<std::byte>>& all, Deadline deadline) {
  return fenced(impl_.get(), "all_gather", [&] {
    std::vector<Bytes> out;
    Status status = impl_->collective(frame::Op::kAllGather, 0, mine, out, deadline);
    if (status.is_ok()) all = std::move(out);
    return status;
  });
}

Status Bootstrap::barrier(Deadline deadline) {
  return fenced(impl_.get(), "barrier", [&] {
    std::vector<Bytes> out;
    return impl_->collective(frame::Op::kBarrier, 0, {}, out, deadline);
  });
}

Status Bootstrap::broadcast(std::vector<std::byte>& data, int root, Deadline deadline) {
  return fenced(impl_.get(), "broadcast", [&] {
    std::vector<Bytes> out;
    const std::span<const std::byte> mine =
        root == impl_->rank() ? std::span<const std::byte>(data) : std::span<const std::byte>();
    Status status = impl_->collective(frame::Op::kBroadcast, root, mine, out, deadline);
    if (status.is_ok() && root != impl_->rank()) data = std::move(out.front());
    return status;
  });
}

}  // namespace chorus::core
