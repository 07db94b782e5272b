#include "ofi_peer_watch.h"

#include "ofi.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

namespace chorus::ofi {

namespace {

constexpr std::uint32_t kHelloMagic = 0x574F4843;  // "CHOW"

/// What a dialling rank sends first on a peer watch connection (16 B):
/// u32 magic "CHOW" | i32 its rank | u64 the context token.
struct WatchHello {
  std::int32_t rank = 0;
  std::uint64_t token = 0;

  static constexpr void fields(auto& io, auto& s) {
    io(provider::wire::Expect{kHelloMagic}, s.rank, s.token);
  }
};
static_assert(provider::wire::size<WatchHello>() == 16);
using wire::WatchCallMe;
constexpr auto kHandshakeLimit = std::chrono::seconds(10);

std::uint64_t random_u64() {
  static thread_local std::random_device device;
  std::uint64_t n = 0;
  while (n == 0) n = (std::uint64_t{device()} << 32) ^ device();
  return n;
}

/// Field 22 of /proc/<pid>/stat (start time in clock ticks); 0 if unreadable.
std::uint64_t process_start_time(std::uint32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  // The command name (field 2) may hold spaces and parentheses: skip past the last ')'.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return 0;
  }
  return std::strtoull(field.c_str(), nullptr, 10);
}

int pidfd_open(std::uint32_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

void set_keepalive(int fd) {
  const int on = 1, idle = 5, interval = 2, count = 3, user_timeout_ms = 15000;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

/// The address peers dial when we listen on `text` (an address or host name).
bool resolve(const std::string& text, sockaddr_storage& out, socklen_t& len) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (::getaddrinfo(text.c_str(), "0", &hints, &res) != 0 || res == nullptr) return false;
  const addrinfo* pick = res;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  std::memcpy(&out, pick->ai_addr, pick->ai_addrlen);
  len = pick->ai_addrlen;
  ::freeaddrinfo(res);
  return true;
}

/// A wildcard listener is advertised under the host name's first
/// non-loopback address of the same family (as the tcp transport does).
bool routable(int family, sockaddr_storage& out) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return false;
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host, nullptr, &hints, &res) != 0) return false;
  bool found = false;
  for (const addrinfo* a = res; a != nullptr && !found; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      if ((ntohl(in->sin_addr.s_addr) >> 24) == 127) continue;
    } else if (a->ai_family == AF_INET6) {
      if (IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr))
        continue;
    }
    std::memcpy(&out, a->ai_addr, a->ai_addrlen);
    found = true;
  }
  ::freeaddrinfo(res);
  return found;
}

}  // namespace

ProcessIdentity ProcessIdentity::current() {
  ProcessIdentity id;
  id.pid = static_cast<std::uint32_t>(::getpid());
  id.start_time = process_start_time(id.pid);
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string text;
  if (std::getline(boot, text)) {
    std::size_t n = 0;
    for (std::size_t i = 0; i + 1 < text.size() && n < id.boot_id.size();) {
      if (text[i] == '-') {
        ++i;
        continue;
      }
      id.boot_id[n++] = static_cast<std::byte>(std::stoi(text.substr(i, 2), nullptr, 16));
      i += 2;
    }
  }
  struct stat st {};
  if (::stat("/proc/self/ns/pid", &st) == 0) id.pid_namespace = st.st_ino;
  return id;
}

PeerWatch::PeerWatch(int rank, int size, Liveness mode, const std::string& bind_address)
    : rank_(rank),
      size_(size),
      mode_(mode),
      self_(ProcessIdentity::current()),
      token_(random_u64()) {
  if (mode_ == Liveness::kAuto || mode_ == Liveness::kSocket) listen(bind_address);
}

PeerWatch::~PeerWatch() = default;

void PeerWatch::listen(const std::string& bind_address) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  const std::string text = bind_address.empty() ? "127.0.0.1" : bind_address;
  if (!resolve(text, addr, len)) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "cannot resolve bind_address '" + text + "' for the peer watch listener");
  }
  UniqueFd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw Error(CHORUS_ERR_SYSTEM, "socket: " + errno_text(errno));
  const int on = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(fd.get(), 64) != 0) {
    throw Error(CHORUS_ERR_SYSTEM, "peer watch listener on " + text + ": " + errno_text(errno));
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof bound;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &blen);
  sockaddr_storage advertised = bound;
  if (bound.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&bound);
    listen_port_ = ntohs(in->sin_port);
    if (in->sin_addr.s_addr == htonl(INADDR_ANY) && !routable(AF_INET, advertised)) {
      reinterpret_cast<sockaddr_in*>(&advertised)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    listen_family_ = 4;
    std::memcpy(listen_address_.data(), &reinterpret_cast<sockaddr_in*>(&advertised)->sin_addr, 4);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&bound);
    listen_port_ = ntohs(in6->sin6_port);
    if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr) && !routable(AF_INET6, advertised)) {
      reinterpret_cast<sockaddr_in6*>(&advertised)->sin6_addr = in6addr_loopback;
    }
    listen_family_ = 6;
    std::memcpy(listen_address_.data(), &reinterpret_cast<sockaddr_in6*>(&advertised)->sin6_addr,
                16);
  }
  listener_ = std::move(fd);
}

void PeerWatch::describe_self(wire::Blob& blob) const {
  blob.pid = self_.pid;
  blob.start_time = self_.start_time;
  blob.boot_id = self_.boot_id;
  blob.pid_namespace = self_.pid_namespace;
  blob.context_token = token_;
  blob.watch_family = listener_.valid() ? listen_family_ : 0;
  blob.watch_port = listen_port_;
  blob.watch_address = listen_address_;
}

PeerWatch::Peer& PeerWatch::peer(int rank) {
  Peer& p = peers_[rank];
  p.rank = rank;
  return p;
}

void PeerWatch::watch(const wire::Blob& blob, const Deadline& deadline) {
  Peer& p = peer(blob.rank);
  if (p.dead) throw Error(CHORUS_ERR_PEER_LOST, p.why);
  if (p.pidfd.valid() || p.socket.valid() || p.pid != 0) return;
  p.pid = blob.pid;
  const bool same_process = blob.pid == self_.pid && blob.boot_id == self_.boot_id &&
                            blob.pid_namespace == self_.pid_namespace;
  const bool local = blob.boot_id == self_.boot_id && blob.pid_namespace == self_.pid_namespace &&
                     self_.pid_namespace != 0;
  if (same_process || mode_ == Liveness::kOff) return;
  if (local && mode_ != Liveness::kSocket) {
    const int fd = pidfd_open(blob.pid);
    if (fd >= 0) {
      p.pidfd.reset(fd);
      p.how = "pidfd of pid " + std::to_string(blob.pid);
      const std::uint64_t start = process_start_time(blob.pid);
      if (start != 0 && blob.start_time != 0 && start != blob.start_time) {
        p.dead = true;
        p.why = "rank " + std::to_string(blob.rank) + " (pid " + std::to_string(blob.pid) +
                ") has exited";
        throw Error(CHORUS_ERR_PEER_LOST, p.why);
      }
      return;
    }
    if (errno == ESRCH) {
      p.dead = true;
      p.why = "rank " + std::to_string(blob.rank) + " (pid " + std::to_string(blob.pid) +
              ") has exited";
      throw Error(CHORUS_ERR_PEER_LOST, p.why);
    }
    log(CHORUS_LOG_INFO, "pidfd_open(" + std::to_string(blob.pid) + ") for rank " +
                             std::to_string(blob.rank) + ": " + errno_text(errno) +
                             (mode_ == Liveness::kAuto ? "; watching it over a socket instead"
                                                       : "; its exit will not be noticed"));
    if (mode_ != Liveness::kAuto) return;
  }
  if (mode_ == Liveness::kPid) {
    log(CHORUS_LOG_INFO, "rank " + std::to_string(blob.rank) +
                             " runs on another host; with transport.ofi.liveness = pid its "
                             "exit is noticed only through provider errors");
    return;
  }
  if (blob.watch_family == 0 || !listener_.valid()) {
    log(CHORUS_LOG_INFO, "rank " + std::to_string(blob.rank) +
                             " has no peer watch listener (its liveness setting differs); its "
                             "exit is noticed only through provider errors");
    return;
  }
  // One watch connection per pair: the higher rank dials, the lower rank
  // accepts it in check().
  if (rank_ > blob.rank) dial(p, blob, deadline);
}

UniqueFd PeerWatch::connect_listener(const wire::Blob& blob, const Deadline& deadline,
                                     std::string& where) const {
  sockaddr_storage addr{};
  socklen_t len = 0;
  if (blob.watch_family == 4) {
    auto* in = reinterpret_cast<sockaddr_in*>(&addr);
    in->sin_family = AF_INET;
    in->sin_port = htons(blob.watch_port);
    std::memcpy(&in->sin_addr, blob.watch_address.data(), 4);
    len = sizeof(sockaddr_in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&addr);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(blob.watch_port);
    std::memcpy(&in6->sin6_addr, blob.watch_address.data(), 16);
    len = sizeof(sockaddr_in6);
  }
  char text[INET6_ADDRSTRLEN] = {};
  ::inet_ntop(addr.ss_family,
              blob.watch_family == 4
                  ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&addr)->sin_addr)
                  : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr),
              text, sizeof text);
  where = std::string(text) + " port " + std::to_string(blob.watch_port);
  UniqueFd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw Error(CHORUS_ERR_SYSTEM, "socket: " + errno_text(errno));
  set_keepalive(fd.get());
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 && errno != EINPROGRESS) {
    throw Error(CHORUS_ERR_PEER_LOST, "rank " + std::to_string(blob.rank) +
                                          ": connecting its peer watch listener at " + where +
                                          ": " + errno_text(errno));
  }
  pollfd pfd{fd.get(), POLLOUT, 0};
  const int pr = ::poll(&pfd, 1, deadline.remaining_ms());
  int err = 0;
  socklen_t elen = sizeof err;
  if (pr <= 0) {
    throw Error(CHORUS_ERR_TIMEOUT, "rank " + std::to_string(blob.rank) +
                                        ": its peer watch listener at " + where +
                                        " did not answer in time");
  }
  ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
  if (err != 0) {
    throw Error(CHORUS_ERR_PEER_LOST, "rank " + std::to_string(blob.rank) +
                                          ": connecting its peer watch listener at " + where +
                                          ": " + errno_text(err));
  }
  return fd;
}

void PeerWatch::dial(Peer& p, const wire::Blob& blob, const Deadline& deadline) {
  std::string where;
  UniqueFd fd = connect_listener(blob, deadline, where);
  std::array<std::byte, provider::wire::size<WatchHello>()> hello{};
  provider::wire::encode(WatchHello{rank_, blob.context_token}, hello.data());
  // 16 bytes into a fresh socket's empty send buffer: one send suffices.
  if (::send(fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL) != 16) {
    throw Error(CHORUS_ERR_PEER_LOST, "rank " + std::to_string(blob.rank) +
                                          ": peer watch hello to " + where + ": " +
                                          errno_text(errno));
  }
  p.socket = std::move(fd);
  p.how = "peer watch connection to " + where;
  log(CHORUS_LOG_DEBUG, "watching rank " + std::to_string(blob.rank) + " over " + where);
}

void PeerWatch::add_pollfds(std::vector<pollfd>& fds) const {
  if (listener_.valid()) fds.push_back({listener_.get(), POLLIN, 0});
  for (const Pending& pending : pending_) fds.push_back({pending.fd.get(), POLLIN, 0});
  for (const auto& [rank, p] : peers_) {
    if (p.dead) continue;
    if (p.pidfd.valid()) fds.push_back({p.pidfd.get(), POLLIN, 0});
    if (p.socket.valid()) fds.push_back({p.socket.get(), POLLIN | POLLRDHUP, 0});
  }
}

void PeerWatch::accept_new() {
  for (;;) {
    const int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (pending_.size() >= 256) {
      ::close(fd);
      log(CHORUS_LOG_WARN, "dropped a peer watch connection: too many handshakes in progress");
      continue;
    }
    set_keepalive(fd);
    Pending p;
    p.fd.reset(fd);
    p.since = Deadline::Clock::now();
    pending_.push_back(std::move(p));
  }
}

void PeerWatch::read_pending() {
  const auto now = Deadline::Clock::now();
  for (auto it = pending_.begin(); it != pending_.end();) {
    Pending& p = *it;
    const ssize_t n = ::recv(p.fd.get(), p.hello.data() + p.got, p.hello.size() - p.got, 0);
    if (n > 0) p.got += static_cast<std::size_t>(n);
    const bool closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
    if (p.got == p.hello.size()) {
      const auto hello = provider::wire::decode<WatchHello>(p.hello.data(), p.hello.size());
      const auto call = provider::wire::decode<WatchCallMe>(p.hello.data(), p.hello.size());
      const int rank = hello ? hello->rank : -1;
      if (call && call->token == token_) {
        call_mes_.push_back(call->key);
      } else if (hello && hello->token == token_ && rank > rank_ && rank < size_) {
        Peer& peer_state = peer(rank);
        if (!peer_state.dead) {
          peer_state.socket = std::move(p.fd);
          peer_state.how = "peer watch connection from rank " + std::to_string(rank);
          log(CHORUS_LOG_DEBUG, "rank " + std::to_string(rank) + " watches us and we it");
        }
      } else {
        log(CHORUS_LOG_WARN, "dropped a peer watch connection with a wrong hello");
      }
      it = pending_.erase(it);
    } else if (closed || now - p.since > kHandshakeLimit) {
      log(CHORUS_LOG_WARN, "dropped a peer watch connection that sent no hello");
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

bool PeerWatch::call_me(const wire::Blob& peer, const Deadline& deadline) {
  if (peer.watch_family == 0) return false;
  try {
    std::string where;
    UniqueFd fd = connect_listener(peer, deadline, where);
    std::array<std::byte, provider::wire::size<WatchCallMe>()> msg{};
    provider::wire::encode(WatchCallMe{peer.key, peer.context_token}, msg.data());
    // Into a fresh socket's empty send buffer: one send suffices. Closing
    // right after it is fine: the peer reads the bytes before the end.
    if (::send(fd.get(), msg.data(), msg.size(), MSG_NOSIGNAL) != 16) return false;
    log(CHORUS_LOG_DEBUG, "call-me to rank " + std::to_string(peer.rank) + " over " + where);
    return true;
  } catch (const Error& e) {
    log(CHORUS_LOG_DEBUG, std::string("call-me over the peer watch listener: ") + e.what());
    return false;
  }
}

std::vector<std::uint32_t> PeerWatch::take_call_mes() {
  std::vector<std::uint32_t> keys;
  keys.swap(call_mes_);
  return keys;
}

std::vector<std::pair<int, std::string>> PeerWatch::check() {
  std::vector<std::pair<int, std::string>> dead;
  if (listener_.valid()) {
    accept_new();
    read_pending();
  }
  for (auto& [rank, p] : peers_) {
    if (p.dead) {
      if (!p.reported) {
        p.reported = true;
        dead.emplace_back(rank, p.why);
      }
      continue;
    }
    if (p.pidfd.valid()) {
      pollfd pfd{p.pidfd.get(), POLLIN, 0};
      if (::poll(&pfd, 1, 0) > 0) {
        p.dead = true;
        p.why = "rank " + std::to_string(rank) + " (pid " + std::to_string(p.pid) + ") exited";
      }
    }
    if (!p.dead && p.socket.valid()) {
      pollfd pfd{p.socket.get(), POLLIN | POLLRDHUP, 0};
      if (::poll(&pfd, 1, 0) > 0) {
        char scratch[64];
        const ssize_t n = ::recv(p.socket.get(), scratch, sizeof scratch, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
            (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
          int err = 0;
          socklen_t elen = sizeof err;
          ::getsockopt(p.socket.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
          p.dead = true;
          p.why = "rank " + std::to_string(rank) + "'s peer watch connection " +
                  (err != 0 ? "failed: " + errno_text(err) : std::string("was closed")) +
                  " (the process or its host is gone)";
        }
      }
    }
    if (p.dead) {
      p.reported = true;
      p.pidfd.reset();
      p.socket.reset();
      dead.emplace_back(rank, p.why);
    }
  }
  return dead;
}

std::string PeerWatch::how(int rank) const {
  auto it = peers_.find(rank);
  return it == peers_.end() ? "not watched" : it->second.how;
}

}  // namespace chorus::ofi
