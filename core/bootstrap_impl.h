// Bootstrap::Impl and the helpers its files share; private to the
// bootstrap. Where each part lives:
//   bootstrap_socket.cc  the event loop, reads, writes, shutdown, failure
//   bootstrap_root.cc    rank 0: listen, accept, authenticate, admit; the
//                        same accept and handshake serve every listener
//   bootstrap_join.cc    the other ranks: connect, authenticate, retry
//   bootstrap_link.cc    the other ranks: links to their ring neighbours
//   bootstrap_star.cc    barrier and broadcast through rank 0, and the
//                        step check every collective makes there
//   bootstrap_pass.cc    all_gather along the ring (bootstrap_ring.h)
//   bootstrap.cc         the public Bootstrap surface and parse_host_port
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
// connection's inbox (the ring's kPass frames to its `passes`); an abort
// frame, an I/O error or a protocol error marks the connection gone and stops
// its reader. Either way the connection is put
// on events_, which the waiting code scans instead of every connection.
#pragma once

#include "core/auth.h"
#include "core/bootstrap.h"
#include "core/bootstrap_ring.h"
#include "core/late_arrivals.h"

#include <fcntl.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::core::bootstrap_detail {

using asio::ip::tcp;
using Bytes = std::vector<std::byte>;
using Clock = std::chrono::steady_clock;

/// One connect attempt is abandoned (and retried) after this long, so a SYN
/// lost to a host that was not up yet does not use up the whole deadline.
inline constexpr auto kConnectAttempt = std::chrono::seconds(5);
/// Pause between connect attempts: starts short, grows to kRetryMax.
inline constexpr auto kRetryFirst = std::chrono::milliseconds(50);
inline constexpr auto kRetryMax = std::chrono::milliseconds(250);
/// Connections rank 0 holds that have not said hello yet; a new one beyond
/// this evicts the oldest (a real rank says hello at once).
inline constexpr std::size_t kMaxPending = 256;
/// A caller has this long from its connect to a hello that rank 0 accepts
/// (authentication included); a real rank needs one round trip.
inline constexpr auto kHandshakeTimeout = std::chrono::seconds(10);
/// Once rank 0 knows that a second job shares its port (and neither a token
/// nor a launcher's job identity tells the jobs apart), it refuses every
/// caller with the reason for this long, or until its init deadline, before
/// it fails: ranks of both jobs that are on their way get the reason instead
/// of a closed port.
inline constexpr auto kContestedLinger = std::chrono::seconds(10);
/// How long a rank 0 that cannot listen (the port is taken) spends telling
/// the holder that a second job is starting on its port.
inline constexpr auto kCollisionNotice = std::chrono::seconds(2);
/// Cause and fix for every refusal that two jobs on one port can explain.
inline constexpr const char* kTwoJobsFix =
    "two jobs were started on one coordinator port, or a stale rank of an earlier run is still "
    "running. Fix: give each job its own port (CHORUS_COORDINATOR, MASTER_PORT), or a job token "
    "(CHORUS_JOB_TOKEN, the same on every rank of one job; chorusrun sets one)";
/// Longest piece of a stranger's abort text that rank 0 copies into its log.
inline constexpr std::size_t kMaxQuotedText = 300;

template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

inline std::string seconds_text(Clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  std::array<char, 32> buf{};
  std::snprintf(buf.data(), buf.size(), s < 10 ? "%.1f s" : "%.0f s", s);
  return buf.data();
}

/// "2, 3, 7-12" for ascending ranks; long lists are cut.
inline std::string rank_list(const std::vector<int>& ranks) {
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

inline std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

inline std::string endpoint_text(const tcp::endpoint& ep) {
  const auto address = ep.address();
  return address.is_v6() ? cat("[", address.to_string(), "]:", ep.port())
                         : cat(address.to_string(), ":", ep.port());
}

/// Keeps side-channel sockets out of processes the host program spawns.
inline void set_cloexec(int fd) {
  if (fd < 0) return;
  const int flags = ::fcntl(fd, F_GETFD);
  if (flags >= 0) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

constexpr std::uint32_t bit(frame::Type type) { return 1u << static_cast<unsigned>(type); }

/// What an abort from elsewhere means here: a job-wide usage error stays one;
/// anything else means this rank has lost its job.
inline int code_from_abort(int code) {
  return code == CHORUS_ERR_INVALID_ARGUMENT ? code : CHORUS_ERR_PEER_LOST;
}

enum class Gone : std::uint8_t { kNo, kIo, kProtocol, kAbort };

/// Where a connection is in the authentication exchange (frame.h).
enum class Auth : std::uint8_t { kNew, kChallenged, kDone };

/// Text from an unauthenticated peer, made safe for a one-line log entry.
inline std::string quoted(std::string_view text) {
  std::string out;
  for (const char ch : text.substr(0, std::min(text.size(), kMaxQuotedText))) {
    const auto u = static_cast<unsigned char>(ch);
    out += (u < 0x20 || u == 0x7f) ? '?' : ch;
  }
  if (text.size() > kMaxQuotedText) out += "...";
  return out;
}

/// A kPass frame received from a ring neighbour, as it is passed on: the
/// writes that send it share it, and the last one to complete frees it.
struct PassedFrame {
  std::array<std::byte, frame::kHeaderSize> head{};
  Bytes payload;
};

/// A queued write and what it keeps alive until it completes (may be null:
/// then the buffers are the caller's to keep).
struct Write {
  std::vector<asio::const_buffer> buffers;
  std::shared_ptr<const void> owned;
};

struct Frame {
  frame::Type type;
  Bytes payload;
};

/// One TCP connection: on rank 0 one per peer (and one per caller that has
/// not said hello yet), on the others one to rank 0 and one per ring
/// neighbour (and, while joining, one per caller without a hello yet).
struct Conn {
  explicit Conn(asio::io_context& io) : socket(io), handshake_timer(io) {}
  tcp::socket socket;
  asio::steady_timer handshake_timer;  ///< bounds a pending caller's handshake
  Auth auth = Auth::kNew;
  auth::Nonce rank_nonce{};   ///< the connecting rank's nonce
  auth::Nonce root_nonce{};   ///< the listening end's nonce (rank 0, or a ring neighbour)
  Bytes auth_frame;           ///< an authentication frame being written
  Bytes proof_frame;          ///< connecting side: the proof and the hello, being written
  std::string where;          ///< the other end, for messages
  int rank = -1;              ///< the other end's rank once known
  bool pending = false;       ///< a listener's caller: accepted, no hello yet
  std::uint32_t allowed = 0;  ///< bit(type) for every frame type the other end may send
  std::array<std::byte, frame::kHeaderSize> header{};
  Bytes payload;             ///< the frame being read
  std::deque<Frame> inbox;   ///< complete frames not yet consumed, but kPass
  std::deque<Frame> passes;  ///< complete kPass frames not yet consumed
  frame::Address listen{};   ///< rank 0: where this rank takes ring links
  bool linked = false;       ///< a ring link whose other end welcomed or was welcomed
  int writes = 0;            ///< our writes queued or in flight
  std::deque<Write> queue;   ///< those writes, oldest in flight
  std::string write_error;   ///< the first failed write
  Gone gone = Gone::kNo;     ///< the reader has stopped, and why
  std::string why;           ///< kIo/kProtocol: reason; kAbort: the other end's text
  int abort_code = 0;
  bool shut = false;  ///< we stopped all I/O on it; its handlers change nothing
};
using ConnPtr = std::shared_ptr<Conn>;

}  // namespace chorus::core::bootstrap_detail

namespace chorus::core {

// Every bootstrap file works with the helpers and types above unqualified,
// as they did when they were one file; this header is included by those
// files only.
using namespace bootstrap_detail;  // NOLINT(google-build-using-namespace)

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
    for (auto* list : {&peers_, &pending_, &links_}) {
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
  std::uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  Status collective(frame::Op op, int root, std::span<const std::byte> mine,
                    std::vector<Bytes>& out, Deadline deadline);
  /// Bootstrap::close_links: every connection to another rank closed, their
  /// handlers drained, and every later collective refused.
  void close_links() {
    for (auto* list : {&peers_, &pending_, &links_}) {
      for (const ConnPtr& c : *list) close(c.get());
      list->clear();
    }
    close(coord_.get());
    coord_.reset();
    drain();
    if (failed_.is_ok())
      failed_ = error(CHORUS_ERR_INTERNAL,
                      "the side channel's connections were closed once the communicator was up; "
                      "it takes no more collectives");
  }
  /// The filter the next all_gathers apply to each complete blob (null: none).
  void set_gather_filter(const BlobFilter* keep) { gather_filter_ = keep; }

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
  void send(const ConnPtr& c, const Buffers& buffers, std::shared_ptr<const void> owned = nullptr);
  void write_next(const ConnPtr& c);
  void shut_down(Conn& c, const frame::Abort* abort);
  void drop(Conn& c, const frame::Abort* abort);
  static void close(Conn* c);
  asio::error_code resolve(Deadline deadline, std::vector<tcp::endpoint>& out);

  // Joining.
  Status listen(const std::vector<tcp::endpoint>& endpoints);
  void accept_next();
  void serve_callers();
  void caller_event(const ConnPtr& c);
  void drop_callers();
  std::optional<Status> join_step();
  void handshake_step(const ConnPtr& c);
  void refuse(const ConnPtr& c, const std::string& why, bool tell);
  void admit(const ConnPtr& c, const Frame& hello_frame);
  void admit_link(const ConnPtr& c, const frame::Hello& hello);
  void start_handshake(const ConnPtr& c);
  std::optional<Status> check_challenge(const ConnPtr& conn, const Frame& f,
                                        const std::string& other);
  std::string check_hello(const frame::Hello& hello, const Conn& c);
  std::string check_link_hello(const frame::Hello& hello) const;
  Status open_link_listener();
  Status link_ring(Deadline deadline, Clock::time_point start);
  void connect_link(int peer, const frame::Address& address);
  std::vector<frame::Address> ring_addresses(int rank) const;
  void contest(const std::string& why);
  void refuse_late_callers();
  void settle_pending();
  void announce_collision(Deadline deadline);
  std::optional<Status> try_join(Deadline deadline, Clock::time_point start,
                                 std::string& last_error);
  asio::error_code connect_once(const std::vector<tcp::endpoint>& endpoints, Deadline deadline);

  // Collectives.
  Status root_collective(frame::Op op, int root, std::span<const std::byte> mine,
                         std::vector<Bytes>& out, Deadline deadline);
  Status peer_collective(frame::Op op, int root, std::span<const std::byte> mine,
                         std::vector<Bytes>& out, Deadline deadline);
  Status collect_contributions(frame::Op op, int root, std::vector<Bytes>& got, Deadline deadline,
                               Clock::time_point start);
  Status root_gather(std::span<const std::byte> mine, std::vector<Bytes>& out, Deadline deadline,
                     Clock::time_point start);
  Status peer_gather(std::span<const std::byte> mine, std::vector<Bytes>& out, Deadline deadline,
                     Clock::time_point start);
  void pass_blob(const ConnPtr& to, int index, std::span<const std::byte> blob);
  void pass_on(const ConnPtr& to, const std::shared_ptr<const PassedFrame>& passed);
  void release_passes();
  void filter_blob(int rank, Bytes& blob) const;
  std::optional<Status> take_pass(Conn& from, std::vector<Bytes>& got, std::vector<char>& done,
                                  int& complete, int& index,
                                  std::shared_ptr<const PassedFrame>& passed);
  ConnPtr link_to(int peer) const;
  std::string who(const Conn& c) const;
  Status gone_status(const Conn& c);

  const int rank_;
  const int size_;
  const std::string coordinator_;  ///< as configured, for messages
  const HostPort host_;
  const std::string token_;     ///< the job token: HMAC key, never sent
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
  bool formed_ = false;  ///< rank 0: every rank has joined; callers are refused
  /// rank 0: why this job cannot tell its ranks from another job's, once known.
  std::string contested_;
  Clock::time_point contested_until_{};
  Deadline join_deadline_ = Deadline::never();
  bool port_taken_ = false;  ///< rank 0: listen found the port in use

  std::vector<ConnPtr> peers_;  ///< rank 0: peers_[r] for 1 <= r < size, null until joined
  std::vector<ConnPtr> links_;  ///< non-root: its ring neighbours' connections (at most 2)
  frame::Address listen_{};     ///< non-root: where it takes ring links (port 0: none)
  std::vector<frame::Address> connect_to_;  ///< non-root: from the welcome, higher neighbours first
  std::vector<ConnPtr> pending_;  ///< while joining, a listening rank's callers without a hello yet
  int joined_ = 0;
  ConnPtr coord_;                ///< non-root: the connection to rank 0
  std::vector<ConnPtr> events_;  ///< connections that got a frame, went away or failed a write
  int writes_in_flight_ = 0;
  /// Bytes this rank has written to the side channel, all connections.
  std::atomic<std::uint64_t> bytes_sent_{0};

  std::uint64_t seq_ = 0;  ///< collectives started, on every rank the same
  Status failed_;          ///< the final error, once there is one
  std::string relay_;      ///< text of an abort to pass on unchanged, if that is what failed us

  // Frames being written; they live here until the write completes or fails.
  Bytes hello_;
  std::vector<Bytes> welcomes_;  ///< rank 0: one per rank; a ring link's welcome: [0]
  std::array<std::byte, frame::kHeaderSize + frame::kOpHeaderSize> contribution_head_{};
  std::vector<std::array<std::byte, frame::kHeaderSize + frame::kOpHeaderSize>> delivery_heads_;
  std::vector<asio::const_buffer> delivery_buffers_;
  /// The frame and op headers of this rank's own blob in the current
  /// all_gather; they live until the call has succeeded (or, after a
  /// failure, until the Bootstrap goes). The frames passed on from a
  /// neighbour are owned by their writes instead (Write::owned): a rank
  /// passes on nearly the whole table, O(N^2) bytes, and holding it until the
  /// call ended doubled what each rank held at its end (docs/scale.md).
  std::deque<std::array<std::byte, frame::kHeaderSize + frame::kOpHeaderSize>> pass_heads_;
  const BlobFilter* gather_filter_ = nullptr;
};

/// Queues a write: one async_write per connection at a time, so frames never
/// interleave however many are queued. The buffers stay the caller's, unless
/// `owned` holds them: then the write frees them once it is done (or dropped).
template <class Buffers>
void Bootstrap::Impl::send(const ConnPtr& c, const Buffers& buffers,
                           std::shared_ptr<const void> owned) {
  ++c->writes;
  ++writes_in_flight_;
  c->queue.push_back(
      Write{{asio::buffer_sequence_begin(buffers), asio::buffer_sequence_end(buffers)},
            std::move(owned)});
  if (c->writes == 1) write_next(c);
}

}  // namespace chorus::core
