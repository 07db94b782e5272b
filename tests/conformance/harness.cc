#include "harness.h"

#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#ifndef CHORUS_CONFORMANCE_DEFAULT_PLUGIN_DIR
#define CHORUS_CONFORMANCE_DEFAULT_PLUGIN_DIR ""
#endif

namespace chorus::conformance {

namespace {

std::mutex g_log_mutex;
std::vector<std::string> g_logs;
bool g_verbose = false;

void host_log(void*, int level, const char* message) {
  std::lock_guard lock(g_log_mutex);
  g_logs.emplace_back(message != nullptr ? message : "(null)");
  if (g_verbose) std::fprintf(stderr, "[plugin log %d] %s\n", level, message);
}

const chorus_host_v1_t g_host = {sizeof(chorus_host_v1_t), 0, nullptr, host_log};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep)) {
    if (!cur.empty()) out.push_back(cur);
  }
  return out;
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? v : nullptr;
}

}  // namespace

// ---- Plugin ----------------------------------------------------------------------

Plugin& Plugin::get() {
  static Plugin plugin;
  return plugin;
}

Plugin::Plugin() {
  g_verbose = env("CHORUS_CONFORMANCE_VERBOSE") != nullptr;
  transport_ = env("CHORUS_CONFORMANCE_TRANSPORT") ? env("CHORUS_CONFORMANCE_TRANSPORT") : "tcp";
  if (const char* b = env("CHORUS_CONFORMANCE_BIND_ADDRESS")) bind_address_ = b;
  std::vector<std::string> candidates;
  if (const char* p = env("CHORUS_CONFORMANCE_PLUGIN")) {
    candidates.emplace_back(p);
  } else {
    const std::string file = "libchorus-transport-" + transport_ + ".so";
    std::vector<std::string> dirs;
    if (const char* sp = env("CHORUS_PLUGIN_PATH")) dirs = split(sp, ':');
    if (CHORUS_CONFORMANCE_DEFAULT_PLUGIN_DIR[0] != '\0') {
      dirs.emplace_back(CHORUS_CONFORMANCE_DEFAULT_PLUGIN_DIR);
    }
    for (const auto& d : dirs) candidates.push_back(d + "/" + file);
  }
  std::string tried;
  for (const auto& c : candidates) {
    handle_ = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ != nullptr) {
      path_ = c;
      break;
    }
    const char* why = ::dlerror();
    tried += "\n  " + c + ": " + (why != nullptr ? why : "unknown error");
  }
  if (handle_ == nullptr) {
    throw std::runtime_error("transport '" + transport_ + "' not loadable; searched:" +
                             (tried.empty() ? std::string(" (no candidates)") : tried));
  }
  ops_ = static_cast<const chorus_transport_plugin_v1_t*>(
      ::dlsym(handle_, CHORUS_TRANSPORT_SYMBOL_V1));
  if (ops_ == nullptr) {
    throw std::runtime_error(path_ + " does not export " CHORUS_TRANSPORT_SYMBOL_V1);
  }
  if (ops_->init == nullptr) throw std::runtime_error(path_ + ": init is NULL");
  if (const int rc = ops_->init(&g_host); rc != CHORUS_OK) {
    throw std::runtime_error(path_ + ": init failed: " + status_name(rc));
  }
  if (const char* cfg = env("CHORUS_CONFORMANCE_CONFIG")) {
    for (const auto& item : split(cfg, ',')) {
      const auto eq = item.find('=');
      if (eq == std::string::npos) {
        throw std::runtime_error("CHORUS_CONFORMANCE_CONFIG entry '" + item + "' is not k=v");
      }
      env_config_.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    }
  }
}

bool Plugin::has_interrupt() const {
  return ops_->struct_size >=
             offsetof(chorus_transport_plugin_v1_t, interrupt) + sizeof(ops_->interrupt) &&
         ops_->interrupt != nullptr;
}

std::vector<std::string> Plugin::logs() const {
  std::lock_guard lock(g_log_mutex);
  return g_logs;
}

void Plugin::clear_logs() {
  std::lock_guard lock(g_log_mutex);
  g_logs.clear();
}

std::string status_name(int status) {
  switch (status) {
    case CHORUS_OK:
      return "CHORUS_OK";
    case CHORUS_ERR_INVALID_ARGUMENT:
      return "CHORUS_ERR_INVALID_ARGUMENT";
    case CHORUS_ERR_UNAVAILABLE:
      return "CHORUS_ERR_UNAVAILABLE";
    case CHORUS_ERR_TIMEOUT:
      return "CHORUS_ERR_TIMEOUT";
    case CHORUS_ERR_PEER_LOST:
      return "CHORUS_ERR_PEER_LOST";
    case CHORUS_ERR_SYSTEM:
      return "CHORUS_ERR_SYSTEM";
    case CHORUS_ERR_INTERNAL:
      return "CHORUS_ERR_INTERNAL";
    case CHORUS_ERR_ABORTED:
      return "CHORUS_ERR_ABORTED";
    case CHORUS_ERR_PENDING:
      return "CHORUS_ERR_PENDING";
    case CHORUS_ERR_AGAIN:
      return "CHORUS_ERR_AGAIN";
    case CHORUS_ERR_NOT_SUPPORTED:
      return "CHORUS_ERR_NOT_SUPPORTED";
    default:
      return "status " + std::to_string(status);
  }
}

std::string last_error() {
  const char* e = tp().last_error();
  return e != nullptr ? e : "(last_error returned NULL)";
}

void check(int rc, const std::string& what) {
  if (rc != CHORUS_OK) {
    throw std::runtime_error(what + ": " + status_name(rc) + " (" + last_error() + ")");
  }
}

// ---- Context / Endpoint ---------------------------------------------------------

Context::Context(int rank, int size, const Kvs& extra, const InfoOptions& options) : rank_(rank) {
  Kvs all = Plugin::get().env_config();
  all.insert(all.end(), extra.begin(), extra.end());
  std::vector<chorus_kv_t> kv;
  for (const auto& [k, v] : all) kv.push_back({k.c_str(), v.c_str(), "conformance"});
  chorus_tp_context_info_t info{};
  info.struct_size = sizeof info;
  info.rank = rank;
  info.size = size;
  info.bind_address = Plugin::get().bind_address();
  info.config = kv.data();
  info.config_count = kv.size();
  // Every context of this process belongs to one "job" (minor 2's job key).
  info.job_key = reinterpret_cast<const unsigned char*>(kConformanceJobKey);
  info.job_key_len = sizeof kConformanceJobKey - 1;
  info.data_channels = options.data_channels;
  if (options.struct_size != 0) info.struct_size = options.struct_size;
  check(tp().context_open(&info, &ctx_), "context_open(rank " + std::to_string(rank) + ")");
  caps_.struct_size = sizeof caps_;
  check(tp().get_caps(ctx_, &caps_), "get_caps");
}

Context::~Context() {
  if (ctx_ != nullptr) tp().context_close(ctx_);
}

int Context::close() {
  const int rc = tp().context_close(ctx_);
  ctx_ = nullptr;
  return rc;
}

std::size_t Context::pump() {
  chorus_tp_completion_t buf[64];
  const int n = tp().poll(ctx_, buf, 64);
  if (n > 0) {
    completions.insert(completions.end(), buf, buf + n);
    return static_cast<std::size_t>(n);
  }
  if (n == CHORUS_ERR_PENDING) {
    chorus_tp_error_t e{};
    check(tp().read_error(ctx_, &e), "read_error after poll said PENDING");
    errors.push_back(e);
    return 1;
  }
  if (n < 0) check(n, "poll");
  return 0;
}

std::size_t Context::count(chorus_tp_endpoint_t* ep, std::uint32_t opcode) const {
  std::size_t n = 0;
  for (const auto& c : completions) n += (c.endpoint == ep && c.opcode == opcode) ? 1 : 0;
  return n;
}

Endpoint open_endpoint(Context& ctx, int peer, int channel) {
  Endpoint e;
  e.ctx = &ctx;
  e.peer = peer;
  e.channel = channel;
  e.blob.resize(ctx.caps().max_address_size);
  std::size_t len = e.blob.size();
  check(
      tp().endpoint_open(ctx.get(), peer, channel, e.blob.data(), &len, &e.ep),
      "endpoint_open(peer " + std::to_string(peer) + ", channel " + std::to_string(channel) + ")");
  if (len > e.blob.size())
    throw std::runtime_error("endpoint_open reported a blob larger than max_address_size");
  e.blob.resize(len);
  return e;
}

int connect_endpoint(Endpoint& ep, const Bytes& peer_blob, int timeout_ms) {
  return tp().endpoint_connect(ep.ep, peer_blob.data(), peer_blob.size(), timeout_ms);
}

void connect_pair(Endpoint& x, Endpoint& y, int timeout_ms) {
  int rc_y = CHORUS_OK;
  std::string err_y;
  std::thread t([&] {
    rc_y = connect_endpoint(y, x.blob, timeout_ms);
    if (rc_y != CHORUS_OK) err_y = last_error();
  });
  const int rc_x = connect_endpoint(x, y.blob, timeout_ms);
  const std::string err_x = rc_x != CHORUS_OK ? last_error() : "";
  t.join();
  if (rc_x != CHORUS_OK || rc_y != CHORUS_OK) {
    throw std::runtime_error(
        "connect_pair: rank " + std::to_string(x.ctx->rank()) + ": " + status_name(rc_x) + " " +
        err_x + "; rank " + std::to_string(y.ctx->rank()) + ": " + status_name(rc_y) + " " + err_y);
  }
}

Registration::Registration(Context& ctx, void* addr, std::size_t length) : ctx_(ctx) {
  check(tp().mem_register(ctx.get(), addr, length, CHORUS_MEM_HOST, &mr_), "mem_register");
}

Registration::~Registration() { tp().mem_deregister(ctx_.get(), mr_); }

Pair::Pair(int channels, const Kvs& extra) : a(0, 2, extra), b(1, 2, extra) {
  for (int c = 0; c < channels; ++c) {
    ea.push_back(open_endpoint(a, 1, c));
    eb.push_back(open_endpoint(b, 0, c));
  }
  for (int c = 0; c < channels; ++c)
    connect_pair(ea[static_cast<std::size_t>(c)], eb[static_cast<std::size_t>(c)]);
}

bool pump_until(const std::vector<Context*>& ctxs, const std::function<bool()>& done,
                int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    for (Context* c : ctxs) {
      while (c->pump() > 0) {
      }
    }
    if (done()) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    if (ctxs.size() == 1) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      const int rc =
          tp().wait(ctxs[0]->get(), static_cast<int>(std::min<long long>(left.count() + 1, 100)));
      if (rc != CHORUS_OK && rc != CHORUS_ERR_TIMEOUT) check(rc, "wait");
    }
  }
}

// ---- data -------------------------------------------------------------------------

namespace {
/// Byte i of the pattern is byte (i % 8) of a splitmix64 hash of (i / 8, seed):
/// cheap to produce a word at a time, and a shifted or swapped block never matches.
inline std::uint64_t pattern_word(std::uint64_t w, std::uint32_t seed) {
  std::uint64_t z = w + 0x9E3779B97F4A7C15ull * (seed + 1ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

void fill_pattern(void* buf, std::size_t n, std::uint32_t seed) {
  auto* p = static_cast<unsigned char*>(buf);
  std::size_t w = 0;
  for (; (w + 1) * 8 <= n; ++w) {
    const std::uint64_t v = pattern_word(w, seed);
    std::memcpy(p + w * 8, &v, 8);
  }
  if (w * 8 < n) {
    const std::uint64_t v = pattern_word(w, seed);
    std::memcpy(p + w * 8, &v, n - w * 8);
  }
}

std::optional<std::size_t> pattern_mismatch(const void* buf, std::size_t n, std::uint32_t seed) {
  const auto* p = static_cast<const unsigned char*>(buf);
  for (std::size_t w = 0; w * 8 < n; ++w) {
    const std::uint64_t v = pattern_word(w, seed);
    const std::size_t len = std::min<std::size_t>(8, n - w * 8);
    if (std::memcmp(p + w * 8, &v, len) != 0) {
      for (std::size_t i = 0; i < len; ++i) {
        if (p[w * 8 + i] != reinterpret_cast<const unsigned char*>(&v)[i]) return w * 8 + i;
      }
    }
  }
  return std::nullopt;
}

// ---- Control / ChildProcess -----------------------------------------------------

namespace {

void write_all(int fd, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      throw std::runtime_error(std::string("control channel write: ") + std::strerror(errno));
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void read_all(int fd, void* data, std::size_t n, Clock::time_point deadline) {
  auto* p = static_cast<unsigned char*>(data);
  while (n > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) throw std::runtime_error("control channel: timed out waiting for the peer");
    pollfd pfd{fd, POLLIN, 0};
    const int pr = ::poll(&pfd, 1, static_cast<int>(left));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    const ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) throw std::runtime_error("control channel: the peer process went away");
    if (r < 0)
      throw std::runtime_error(std::string("control channel read: ") + std::strerror(errno));
    p += r;
    n -= static_cast<std::size_t>(r);
  }
}

}  // namespace

Control& Control::operator=(Control&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

Control::~Control() {
  if (fd_ >= 0) ::close(fd_);
}

void Control::send(const std::string& tag, const Bytes& data) {
  const std::uint32_t header[2] = {static_cast<std::uint32_t>(tag.size()),
                                   static_cast<std::uint32_t>(data.size())};
  write_all(fd_, header, sizeof header);
  write_all(fd_, tag.data(), tag.size());
  if (!data.empty()) write_all(fd_, data.data(), data.size());
}

Bytes Control::expect(const std::string& tag, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  std::uint32_t header[2];
  read_all(fd_, header, sizeof header, deadline);
  if (header[0] > 4096 || header[1] > (1u << 20))
    throw std::runtime_error("control channel: bad frame");
  std::string got(header[0], '\0');
  read_all(fd_, got.data(), got.size(), deadline);
  Bytes data(header[1]);
  read_all(fd_, data.data(), data.size(), deadline);
  if (got == "error") {
    throw std::runtime_error("peer process failed: " + std::string(data.begin(), data.end()));
  }
  if (got != tag)
    throw std::runtime_error("control channel: expected '" + tag + "', got '" + got + "'");
  return data;
}

ChildProcess::ChildProcess(const std::function<void(Control&)>& body) {
  Plugin::get();  // load before fork so both processes use the same image
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw std::runtime_error(std::string("socketpair: ") + std::strerror(errno));
  }
  std::fflush(nullptr);
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid_ == 0) {
    ::close(sv[0]);
    Control ctl(sv[1]);
    int code = 0;
    try {
      body(ctl);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "conformance peer process %d: %s\n", static_cast<int>(::getpid()),
                   e.what());
      try {
        const std::string what = e.what();
        ctl.send("error", Bytes(what.begin(), what.end()));
      } catch (...) {
      }
      code = 1;
    } catch (...) {
      code = 2;
    }
    ::_exit(code);  // never run the parent's atexit handlers or Catch again
  }
  ::close(sv[1]);
  control_ = Control(sv[0]);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status;
    ::waitpid(pid_, &status, 0);
  }
}

void ChildProcess::kill(int sig) {
  if (pid_ > 0) ::kill(pid_, sig);
}

int ChildProcess::join(int timeout_ms) {
  if (pid_ <= 0) return -1;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -1;
    }
    if (Clock::now() >= deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      pid_ = -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

std::chrono::microseconds cpu_time() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  const auto tv = [](const timeval& t) {
    return std::chrono::seconds(t.tv_sec) + std::chrono::microseconds(t.tv_usec);
  };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

}  // namespace chorus::conformance
