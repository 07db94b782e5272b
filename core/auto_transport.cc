#include "core/auto_transport.h"

#include <chorus/chorus.h>
#include <chorus/transport_names.hpp>

#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <limits.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>

namespace chorus::core {
namespace {

// Sub-transport slots. Every array indexed by a slot has these two entries.
constexpr int kLocal = 0;
constexpr int kFabric = 1;
constexpr const char* kRole[2] = {"local", "fabric"};

// Blob layout (all integers little-endian):
//   "CHAU" magic, u8 version, u8 id length, id, u8 local-name length, name,
//   u8 fabric-name length, name, u32 local-blob length, blob,
//   u32 fabric-blob length, blob.
constexpr unsigned char kMagic[4] = {'C', 'H', 'A', 'U'};
constexpr uint8_t kVersion = 1;
constexpr size_t kMaxName = 255;

thread_local std::string t_error;
std::atomic<int> g_helper_threads{0};  // DualWait threads started, ever
const chorus_host_v1_t* g_host = nullptr;

int fail(int rc, std::string message) {
  t_error = std::move(message);
  return rc;
}

void log_host(int level, const std::string& message) {
  if (g_host && g_host->struct_size >= offsetof(chorus_host_v1_t, log) + sizeof(void*) &&
      g_host->log)
    g_host->log(g_host->ctx, level, message.c_str());
}

bool has_op(const chorus_transport_plugin_v1_t* t, size_t offset, const void* op) {
  return t->struct_size >= offset + sizeof(void*) && op != nullptr;
}

struct Sub {
  std::shared_ptr<Plugin> plugin;  // declared first: outlives the context below
  const chorus_transport_plugin_v1_t* tp = nullptr;
  chorus_tp_context_t* ctx = nullptr;
  chorus_tp_caps_t caps{};
  std::string name;
  size_t endpoints = 0;  // sub-endpoints open in this context

  bool can_interrupt() const {
    return has_op(tp, offsetof(chorus_transport_plugin_v1_t, interrupt),
                  reinterpret_cast<const void*>(tp->interrupt));
  }
  /// The sub-context's wait object (transport.h, minor 4), or -1: absent
  /// from an older table, NULL, or NOT_SUPPORTED for this context.
  int wait_fd() const {
    if (!ctx || !has_op(tp, offsetof(chorus_transport_plugin_v1_t, wait_fd),
                        reinterpret_cast<const void*>(tp->wait_fd)))
      return -1;
    int fd = -1;
    return tp->wait_fd(ctx, &fd) == CHORUS_OK && fd >= 0 ? fd : -1;
  }
  /// Records the sub-transport's last_error (named) as ours and returns rc.
  int pass_on(int rc, const std::string& what) const {
    return fail(rc, what + " (" + name + "): " + tp->last_error());
  }
};

/// Sleeps in one sub-context's wait on its own thread while the caller sleeps
/// in the other's, so a rank with peers on both sub-transports blocks on both
/// at once. Whichever wakes first, other than by timeout, interrupts the
/// other; the caller returns only once the helper is out of its wait again,
/// so outside a wait() call the helper never touches a sub-context and the
/// one-thread-per-context rule of the ABI holds. A stale interrupt (both woke
/// at the same moment) costs the next wait one spurious wake-up, which the
/// ABI allows; interrupts latch (docs/transport-abi.md §1.10), so neither
/// side can miss its wake-up.
class DualWait {
 public:
  DualWait() = default;
  DualWait(const DualWait&) = delete;
  DualWait& operator=(const DualWait&) = delete;
  ~DualWait() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  /// Blocks in `first`'s wait here and `second`'s on the helper thread. OK if
  /// either woke, TIMEOUT if both timed out, else the first error.
  int wait(Sub& first, Sub& second, int timeout_ms) {
    if (broken_) return fail(CHORUS_ERR_INTERNAL, broken_message_);
    if (!thread_.joinable()) {
      thread_ = std::thread([this] { run(); });
      g_helper_threads.fetch_add(1, std::memory_order_relaxed);
    }
    uint64_t gen = 0;
    {
      std::lock_guard lock(mu_);
      gen = ++requested_;
      helper_sub_ = &second;
      helper_timeout_ = timeout_ms;
      caller_back_.store(false);
    }
    cv_.notify_all();
    int rc = first.tp->wait(first.ctx, timeout_ms);
    std::string message = rc == CHORUS_OK || rc == CHORUS_ERR_TIMEOUT ? "" : first.tp->last_error();
    caller_back_.store(true);
    std::unique_lock lock(mu_);
    // After a timeout the helper, with the same timeout, is about to time
    // out too: give it a moment rather than leave an interrupt behind that
    // would cut the next wait short. Otherwise wake it now.
    if (rc == CHORUS_ERR_TIMEOUT)
      done_cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return finished_ == gen; });
    if (finished_ != gen) {
      lock.unlock();
      second.tp->interrupt(second.ctx);
      lock.lock();
    }
    // The helper has returned or was just interrupted; this bound only
    // catches a sub-transport whose wait ignores its interrupt.
    const auto limit = std::chrono::milliseconds(10000);
    if (!done_cv_.wait_for(lock, limit, [&] { return finished_ == gen; })) {
      broken_ = true;
      broken_message_ = "wait: sub-transport '" + second.name +
                        "' did not return from wait within " + std::to_string(limit.count()) +
                        " ms of its " + std::to_string(timeout_ms) +
                        " ms timeout; this context cannot be used any more";
      return fail(CHORUS_ERR_INTERNAL, broken_message_);
    }
    if (rc != CHORUS_OK && rc != CHORUS_ERR_TIMEOUT)
      return fail(rc, "wait (" + first.name + "): " + message);
    if (helper_rc_ != CHORUS_OK && helper_rc_ != CHORUS_ERR_TIMEOUT)
      return fail(helper_rc_, "wait (" + second.name + "): " + helper_message_);
    if (rc == CHORUS_OK || helper_rc_ == CHORUS_OK) return CHORUS_OK;
    return fail(CHORUS_ERR_TIMEOUT,
                "wait: no completion within " + std::to_string(timeout_ms) + " ms");
  }

  /// Who to interrupt when the helper wakes first.
  Sub* caller_sub = nullptr;

 private:
  void run() {
    // Signals stay with the host's threads.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    uint64_t seen = 0;
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || requested_ != seen; });
      if (stop_) return;
      seen = requested_;
      Sub* sub = helper_sub_;
      int timeout_ms = helper_timeout_;
      lock.unlock();
      int rc = sub->tp->wait(sub->ctx, timeout_ms);
      std::string message =
          rc == CHORUS_OK || rc == CHORUS_ERR_TIMEOUT ? "" : sub->tp->last_error();
      lock.lock();
      helper_rc_ = rc;
      helper_message_ = std::move(message);
      // Only a real wake-up is passed on: after a timeout the caller times
      // out by itself. Decided before the request is marked finished: until
      // then the caller cannot return and start its next wait, which clears
      // caller_back_ again. Deciding after it (as this once did) let a late
      // look see the next wait's caller_back_, interrupt that wait at once,
      // which interrupted the helper, and so on: a wait that never slept.
      if (rc != CHORUS_ERR_TIMEOUT && !caller_back_.load() && caller_sub)
        caller_sub->tp->interrupt(caller_sub->ctx);
      finished_ = seen;
      lock.unlock();
      done_cv_.notify_all();
      lock.lock();
    }
  }

  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;       // caller -> helper: a new request or stop
  std::condition_variable done_cv_;  // helper -> caller: request finished
  bool stop_ = false;
  uint64_t requested_ = 0;
  uint64_t finished_ = 0;
  Sub* helper_sub_ = nullptr;
  int helper_timeout_ = 0;
  int helper_rc_ = CHORUS_OK;
  std::string helper_message_;
  std::atomic<bool> caller_back_{true};
  bool broken_ = false;  // caller thread only
  std::string broken_message_;
};

/// Both sub-contexts have a wait object: one epoll set holds both fds plus an
/// eventfd that interrupt() rings, and wait() sleeps in it on the caller's
/// thread, so no helper thread is needed. The set is also the composite's own
/// wait object. Level-triggered: a sub fd stays ready until that sub's poll
/// drains it, the eventfd until drain_wake().
class FdWait {
 public:
  FdWait() = default;
  FdWait(const FdWait&) = delete;
  FdWait& operator=(const FdWait&) = delete;
  ~FdWait() {
    if (epoll_ >= 0) ::close(epoll_);
    if (wake_ >= 0) ::close(wake_);
  }

  /// Builds the set over `fds`; false (with t_error set) on a system error.
  bool open(const int (&fds)[2]) {
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_ < 0 || wake_ < 0) return system_error("epoll_create1/eventfd");
    for (int fd : {fds[0], fds[1], wake_}) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) return system_error("epoll_ctl");
    }
    return true;
  }
  bool active() const { return epoll_ >= 0; }
  int fd() const { return epoll_; }

  /// Rings the eventfd (any thread). Written before the flag is set, so a
  /// drain that sees the flag always finds the count it has to clear.
  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_, &one, sizeof one);
    wake_pending_.store(true, std::memory_order_release);
  }
  /// Clears the eventfd if wake() rang it; one atomic load otherwise.
  void drain_wake() {
    if (!wake_pending_.load(std::memory_order_relaxed)) return;
    wake_pending_.store(false, std::memory_order_relaxed);
    uint64_t value;
    [[maybe_unused]] ssize_t n = ::read(wake_, &value, sizeof value);
  }
  /// Sleeps until a fd of the set is readable or `timeout_ms` passes
  /// (epoll_wait's convention). True when something is readable.
  bool sleep(int timeout_ms) {
    epoll_event ev[3];
    const int n = ::epoll_wait(epoll_, ev, 3, timeout_ms);
    return n != 0;  // EINTR counts as a (spurious) wake-up
  }

 private:
  bool system_error(const char* what) {
    fail(CHORUS_ERR_SYSTEM, std::string(what) + ": " + std::strerror(errno));
    if (epoll_ >= 0) ::close(epoll_);
    if (wake_ >= 0) ::close(wake_);
    epoll_ = wake_ = -1;
    return false;
  }
  int epoll_ = -1;
  int wake_ = -1;
  std::atomic<bool> wake_pending_{false};
};

struct AutoContext;

struct AutoEndpoint {
  AutoContext* owner = nullptr;
  int peer = -1;
  int channel = 0;
  chorus_tp_endpoint_t* sub[2] = {nullptr, nullptr};
  int chosen = -1;  // slot in use once connected
};

struct AutoMr {
  chorus_tp_mr_t* sub[2] = {nullptr, nullptr};
};

/// The composite context. Like any context it is driven by one thread at a
/// time; only interrupt() may run concurrently, and it touches `interrupted`
/// and the sub-transports' own interrupt ops only.
struct AutoContext {
  Sub subs[2];
  int rank = 0;
  int data_channels = 0;  // chorus_tp_context_info_t, minor 3; 0: unknown
  std::string host_id;
  chorus_tp_caps_t caps{};
  std::vector<std::unique_ptr<AutoEndpoint>> endpoints;
  std::unordered_map<const chorus_tp_endpoint_t*, AutoEndpoint*> by_sub[2];
  std::set<AutoMr*> mrs;   // owned; freed at deregister or context_close
  int pending_error = -1;  // slot whose poll reported PENDING, until read_error
  int poll_first = 0;      // slot polled first, alternating so neither starves
  std::atomic<bool> interrupted{false};
  bool warned_local = false;  // the fallback warning is logged once per context
  FdWait fds;                 // active when both sub-contexts have a wait object
  DualWait dual;  // declared last: its thread is joined before the rest goes

  ~AutoContext() {
    for (AutoMr* m : mrs) delete m;
  }

  void close_sub_endpoint(AutoEndpoint& ep, int slot, int& first_rc) {
    if (!ep.sub[slot]) return;
    by_sub[slot].erase(ep.sub[slot]);
    int rc = subs[slot].tp->endpoint_close(ep.sub[slot]);
    if (rc != CHORUS_OK && first_rc == CHORUS_OK)
      first_rc = subs[slot].pass_on(rc, "endpoint_close");
    ep.sub[slot] = nullptr;
    --subs[slot].endpoints;
  }

  /// False when the local sub-transport could not be loaded or could not open
  /// a context (and was not set explicitly): every peer goes over the fabric.
  bool has_local() const { return subs[kLocal].ctx != nullptr; }

  /// Logs, once per context, that peers on this host are reached over the
  /// fabric because the local sub-transport failed, with why and the fix.
  void warn_local_fallback(const std::string& why) {
    if (warned_local) return;
    warned_local = true;
    log_host(CHORUS_LOG_WARN,
             "auto: rank " + std::to_string(rank) + ": the local sub-transport '" +
                 subs[kLocal].name + "' " + why + "; ranks on this host are reached over '" +
                 subs[kFabric].name +
                 "' instead, which is slower. To fix: give the job more memory for shared "
                 "segments (containers: a larger --shm-size or memory limit), or lower "
                 "transport.shm.ring_size; set transport.name = \"" +
                 subs[kFabric].name + "\" to use the fabric on purpose and silence this");
  }

  chorus_tp_endpoint_t* outer(int slot, chorus_tp_endpoint_t* inner) const {
    auto it = by_sub[slot].find(inner);
    return it == by_sub[slot].end() ? nullptr : reinterpret_cast<chorus_tp_endpoint_t*>(it->second);
  }
};

AutoContext* from(chorus_tp_context_t* c) { return reinterpret_cast<AutoContext*>(c); }
AutoEndpoint* from(chorus_tp_endpoint_t* e) { return reinterpret_cast<AutoEndpoint*>(e); }
AutoMr* from(chorus_tp_mr_t* m) { return reinterpret_cast<AutoMr*>(m); }

bool valid_name(const std::string& s) {
  return !s.empty() && s.size() <= kMaxName && std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '-';
  });
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

/// Inode of a namespace link such as /proc/self/ns/net ("net:[4026531840]").
std::string namespace_inode(const char* link) {
  char buf[128];
  ssize_t n = ::readlink(link, buf, sizeof buf - 1);
  if (n <= 0) return "?";
  buf[n] = '\0';
  std::string s(buf);
  auto open = s.find('[');
  auto close = s.find(']');
  return open != std::string::npos && close != std::string::npos && close > open
             ? s.substr(open + 1, close - open - 1)
             : s;
}

// ---- blob encoding ---------------------------------------------------------------

void put_u8_field(std::vector<std::byte>& out, const std::string& s) {
  out.push_back(std::byte(s.size()));
  for (char c : s) out.push_back(std::byte(c));
}

void put_u32_field(std::vector<std::byte>& out, const std::vector<std::byte>& b) {
  uint32_t n = uint32_t(b.size());
  for (int i = 0; i < 4; ++i) out.push_back(std::byte((n >> (8 * i)) & 0xff));
  out.insert(out.end(), b.begin(), b.end());
}

class Reader {
 public:
  explicit Reader(std::span<const std::byte> d) : d_(d) {}
  bool bytes(size_t n, std::span<const std::byte>& out) {
    if (d_.size() - pos_ < n) return false;
    out = d_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool u8_string(std::string& out) {
    std::span<const std::byte> len, s;
    if (!bytes(1, len) || !bytes(size_t(len[0]), s)) return false;
    out.assign(reinterpret_cast<const char*>(s.data()), s.size());
    return true;
  }
  bool u32_blob(std::vector<std::byte>& out) {
    std::span<const std::byte> len, s;
    if (!bytes(4, len)) return false;
    uint32_t n = 0;
    for (int i = 0; i < 4; ++i) n |= uint32_t(len[size_t(i)]) << (8 * i);
    if (!bytes(n, s)) return false;
    out.assign(s.begin(), s.end());
    return true;
  }
  bool at_end() const { return pos_ == d_.size(); }

 private:
  std::span<const std::byte> d_;
  size_t pos_ = 0;
};

// ---- the ops ---------------------------------------------------------------------

int auto_init(const chorus_host_v1_t* host) {
  g_host = host;
  return CHORUS_OK;
}

const char* auto_last_error() { return t_error.c_str(); }

int auto_context_close(chorus_tp_context_t* c);

int auto_context_open(const chorus_tp_context_info_t* info, chorus_tp_context_t** ctx_out) {
  if (!info || !ctx_out) return fail(CHORUS_ERR_INVALID_ARGUMENT, "context_open: NULL argument");
  std::string names[2] = {"shm", "tcp"};
  bool local_explicit = false;  // transport.auto.local set: its failure is an error
  std::string host_id, plugin_path;
  struct Kv {
    std::string key, value, origin;
  };
  std::map<std::string, std::vector<Kv>> sub_settings;
  for (size_t i = 0; i < info->config_count; ++i) {
    const chorus_kv_t& kv = info->config[i];
    std::string key = kv.key ? kv.key : "";
    std::string value = kv.value ? kv.value : "";
    std::string origin = kv.origin && *kv.origin ? kv.origin : "?";
    auto bad = [&](const std::string& why) {
      return fail(CHORUS_ERR_INVALID_ARGUMENT,
                  "transport 'auto': key '" + key + "' (set by " + origin + "): " + why);
    };
    if (key == "local" || key == "fabric") {
      if (!valid_name(value) || value == kAutoTransportName)
        return bad("'" + value + "' is not a transport name (e.g. shm, tcp, verbs, ofi)");
      names[key == "local" ? kLocal : kFabric] = value;
      local_explicit = local_explicit || key == "local";
    } else if (key == "host_id") {
      if (value.empty() || value.size() > kAutoMaxHostId)
        return bad("a host id is 1 to " + std::to_string(kAutoMaxHostId) + " characters");
      host_id = value;
    } else if (key == "plugin_path") {
      plugin_path = value;
    } else if (auto dot = key.find('.');
               dot != std::string::npos && dot > 0 && dot + 1 < key.size()) {
      sub_settings[key.substr(0, dot)].push_back({key.substr(dot + 1), value, origin});
    } else {
      return bad(
          "unknown key; known: local, fabric, host_id (and <sub-transport>.<key>, handed on "
          "to that sub-transport)");
    }
  }
  if (names[kLocal] == names[kFabric])
    return fail(CHORUS_ERR_INVALID_ARGUMENT,
                "transport 'auto': local and fabric are both '" + names[kLocal] +
                    "'; to use one transport for every peer, set transport.name = \"" +
                    names[kLocal] + "\" instead");
  for (const auto& [sub, list] : sub_settings)
    if (sub != names[kLocal] && sub != names[kFabric])
      return fail(CHORUS_ERR_INVALID_ARGUMENT,
                  "transport 'auto': setting '" + sub + "." + list.front().key + "' (set by " +
                      list.front().origin + ") is for transport '" + sub + "', which is neither " +
                      "the local ('" + names[kLocal] + "') nor the fabric ('" + names[kFabric] +
                      "') sub-transport");

  auto ctx = std::make_unique<AutoContext>();
  ctx->rank = info->rank;
  ctx->data_channels = data_channels_of(*info);
  ctx->host_id = host_id.empty() ? auto_host_identity() : host_id;
  if (ctx->host_id.size() > kAutoMaxHostId) ctx->host_id.resize(kAutoMaxHostId);

  std::vector<std::string> extra;
  {
    std::stringstream ss(plugin_path);
    std::string item;
    while (std::getline(ss, item, ':'))
      if (!item.empty()) extra.push_back(item);
  }
  auto search = plugin_search_path(extra);
  for (int slot : {kLocal, kFabric}) ctx->subs[slot].name = names[slot];
  for (int slot : {kLocal, kFabric}) {
    Sub& sub = ctx->subs[slot];
    auto loaded = load_plugin(PluginKind::kTransport, sub.name, search);
    if (!loaded.is_ok() && slot == kLocal && !local_explicit) {
      ctx->warn_local_fallback("is not available (" + loaded.status().message() + ")");
      continue;
    }
    if (!loaded.is_ok()) {
      auto_context_close(reinterpret_cast<chorus_tp_context_t*>(ctx.release()));
      return fail(CHORUS_ERR_UNAVAILABLE,
                  "transport 'auto' needs its " + std::string(kRole[slot]) + " sub-transport '" +
                      names[slot] + "' (transport.auto." + kRole[slot] + "): " +
                      loaded.status().message() + "\nBuild or install libchorus-transport-" +
                      names[slot] + ".so, choose another with transport.auto." + kRole[slot] +
                      ", or pin a single transport with transport.name");
    }
    sub.plugin = *loaded;
    sub.tp = sub.plugin->transport();
    std::vector<chorus_kv_t> kv;
    if (auto it = sub_settings.find(sub.name); it != sub_settings.end())
      for (const Kv& s : it->second)
        kv.push_back({s.key.c_str(), s.value.c_str(), s.origin.c_str()});
    chorus_tp_context_info_t sub_info{};
    std::memcpy(&sub_info, info, std::min(info->struct_size, sizeof sub_info));
    sub_info.struct_size = std::min(info->struct_size, sizeof sub_info);
    sub_info.config = kv.empty() ? nullptr : kv.data();
    sub_info.config_count = kv.size();
    int rc = sub.tp->context_open(&sub_info, &sub.ctx);
    // A bad setting stays an error; only a refusal (resources, permissions)
    // of the default local sub-transport falls back.
    if (rc != CHORUS_OK && rc != CHORUS_ERR_INVALID_ARGUMENT && slot == kLocal && !local_explicit) {
      sub.ctx = nullptr;
      ctx->warn_local_fallback("could not open a context (" + std::string(sub.tp->last_error()) +
                               ")");
      continue;
    }
    if (rc != CHORUS_OK) {
      sub.ctx = nullptr;
      std::string why = sub.tp->last_error();
      auto_context_close(reinterpret_cast<chorus_tp_context_t*>(ctx.release()));
      return fail(rc, "transport 'auto': the " + std::string(kRole[slot]) + " sub-transport '" +
                          names[slot] + "' could not open a context: " + why);
    }
    sub.caps.struct_size = sizeof sub.caps;
    if (int crc = sub.tp->get_caps(sub.ctx, &sub.caps); crc != CHORUS_OK) {
      std::string why = sub.tp->last_error();
      auto_context_close(reinterpret_cast<chorus_tp_context_t*>(ctx.release()));
      return fail(crc, "transport 'auto': get_caps of '" + names[slot] + "' failed: " + why);
    }
  }

  // Conservative combination: every limit is the smaller one (a zero limit
  // means "not stated" and does not count), registration is needed if either
  // needs it, optional features only if both have them.
  auto min_known = [](uint64_t a, uint64_t b) { return a == 0 ? b : b == 0 ? a : std::min(a, b); };
  // Without a local sub-transport the fabric's caps are the composite's.
  const chorus_tp_caps_t& b = ctx->subs[kFabric].caps;
  const chorus_tp_caps_t& a = ctx->has_local() ? ctx->subs[kLocal].caps : b;
  ctx->caps.struct_size = sizeof ctx->caps;
  ctx->caps.max_message_size = min_known(a.max_message_size, b.max_message_size);
  ctx->caps.max_outstanding_sends =
      uint32_t(min_known(a.max_outstanding_sends, b.max_outstanding_sends));
  ctx->caps.max_outstanding_recvs =
      uint32_t(min_known(a.max_outstanding_recvs, b.max_outstanding_recvs));
  ctx->caps.flags = ((a.flags | b.flags) & CHORUS_TP_CAP_NEEDS_REGISTRATION) |
                    (a.flags & b.flags & ~uint32_t(CHORUS_TP_CAP_NEEDS_REGISTRATION));
  uint64_t address = auto_blob_overhead() +
                     (ctx->has_local() ? (a.max_address_size ? a.max_address_size : 1024) : 0) +
                     (b.max_address_size ? b.max_address_size : 1024);
  ctx->caps.max_address_size = uint32_t(address);
  log_host(CHORUS_LOG_DEBUG, "auto: rank " + std::to_string(info->rank) + " opened " +
                                 (ctx->has_local() ? names[kLocal] + " (local) and " : "") +
                                 names[kFabric] + " (fabric); host identity " + ctx->host_id);
  // Both sub-contexts have a wait object: wait() sleeps on both with one
  // epoll and never starts the helper thread. Failing that, the thread.
  const int sub_fds[2] = {ctx->subs[kLocal].wait_fd(), ctx->subs[kFabric].wait_fd()};
  if (sub_fds[0] >= 0 && sub_fds[1] >= 0 && !ctx->fds.open(sub_fds))
    log_host(CHORUS_LOG_WARN, "auto: rank " + std::to_string(info->rank) +
                                  ": no epoll over the wait objects (" + t_error +
                                  "); waits use a helper thread");
  *ctx_out = reinterpret_cast<chorus_tp_context_t*>(ctx.release());
  return CHORUS_OK;
}

int auto_context_close(chorus_tp_context_t* c) {
  if (!c) return fail(CHORUS_ERR_INVALID_ARGUMENT, "context_close: NULL context");
  std::unique_ptr<AutoContext> ctx(from(c));
  int first = CHORUS_OK;
  // A sub-context closes its own endpoints and registrations.
  for (Sub& sub : ctx->subs) {
    if (!sub.ctx) continue;
    int rc = sub.tp->context_close(sub.ctx);
    if (rc != CHORUS_OK && first == CHORUS_OK) first = sub.pass_on(rc, "context_close");
    sub.ctx = nullptr;
  }
  return first;
}

int auto_get_caps(chorus_tp_context_t* c, chorus_tp_caps_t* caps_out) {
  if (!c || !caps_out) return fail(CHORUS_ERR_INVALID_ARGUMENT, "get_caps: NULL argument");
  size_t room = caps_out->struct_size == 0
                    ? sizeof(chorus_tp_caps_t)
                    : std::min(caps_out->struct_size, sizeof(chorus_tp_caps_t));
  chorus_tp_caps_t caps = from(c)->caps;
  caps.struct_size = room;
  std::memcpy(caps_out, &caps, room);
  return CHORUS_OK;
}

int auto_endpoint_open(chorus_tp_context_t* c, int peer_rank, int channel, void* address_out,
                       size_t* address_len, chorus_tp_endpoint_t** ep_out) {
  if (!c || !address_out || !address_len || !ep_out)
    return fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_open: NULL argument");
  AutoContext* ctx = from(c);
  auto ep = std::make_unique<AutoEndpoint>();
  ep->owner = ctx;
  ep->peer = peer_rank;
  ep->channel = channel;
  AutoBlob blob;
  blob.host_id = ctx->host_id;
  blob.local_name = ctx->subs[kLocal].name;
  blob.fabric_name = ctx->subs[kFabric].name;
  int rc = CHORUS_OK;
  for (int slot : {kLocal, kFabric}) {
    Sub& sub = ctx->subs[slot];
    std::vector<std::byte>& out = slot == kLocal ? blob.local : blob.fabric;
    // An empty local address tells the peer that this endpoint has no local
    // half: the pair then uses the fabric, whatever the hosts.
    if (slot == kLocal && !ctx->has_local()) continue;
    out.resize(sub.caps.max_address_size ? sub.caps.max_address_size : 1024);
    size_t len = out.size();
    int orc = sub.tp->endpoint_open(sub.ctx, peer_rank, channel, out.data(), &len, &ep->sub[slot]);
    if (orc != CHORUS_OK && orc != CHORUS_ERR_INVALID_ARGUMENT && slot == kLocal) {
      // Out of shared memory, or refused: this pair falls back to the fabric.
      ep->sub[slot] = nullptr;
      out.clear();
      ctx->warn_local_fallback("could not open an endpoint to rank " + std::to_string(peer_rank) +
                               " (" + sub.tp->last_error() + ")");
      continue;
    }
    if (orc != CHORUS_OK) {
      ep->sub[slot] = nullptr;
      rc = sub.pass_on(orc, "endpoint_open");
      break;
    }
    ++sub.endpoints;
    ctx->by_sub[slot][ep->sub[slot]] = ep.get();
    out.resize(len);
  }
  Result<std::vector<std::byte>> encoded = Status(CHORUS_ERR_INTERNAL, "not encoded");
  if (rc == CHORUS_OK) {
    encoded = auto_blob_encode(blob);
    if (!encoded.is_ok())
      rc = fail(encoded.status().code(), "endpoint_open: " + encoded.status().message());
    else if (encoded->size() > *address_len)
      rc = fail(CHORUS_ERR_INVALID_ARGUMENT,
                "endpoint_open: the address buffer holds " + std::to_string(*address_len) +
                    " bytes; this endpoint's address needs " + std::to_string(encoded->size()) +
                    " (max_address_size is " + std::to_string(ctx->caps.max_address_size) + ")");
  }
  if (rc != CHORUS_OK) {
    std::string why = t_error;
    int ignored = CHORUS_OK;
    for (int slot : {kLocal, kFabric}) ctx->close_sub_endpoint(*ep, slot, ignored);
    return fail(rc, why);
  }
  std::memcpy(address_out, encoded->data(), encoded->size());
  *address_len = encoded->size();
  *ep_out = reinterpret_cast<chorus_tp_endpoint_t*>(ep.get());
  ctx->endpoints.push_back(std::move(ep));
  return CHORUS_OK;
}

int auto_endpoint_connect(chorus_tp_endpoint_t* e, const void* peer_address, size_t length,
                          int timeout_ms) {
  if (!e || (!peer_address && length > 0))
    return fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_connect: NULL argument");
  AutoEndpoint* ep = from(e);
  AutoContext* ctx = ep->owner;
  if (ep->chosen >= 0)
    return fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_connect: the endpoint to rank " +
                                                 std::to_string(ep->peer) +
                                                 " is already connected");
  auto blob = auto_blob_decode({static_cast<const std::byte*>(peer_address), length});
  if (!blob.is_ok())
    return fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_connect: rank " + std::to_string(ep->peer) +
                                                 " sent no auto transport address (" +
                                                 blob.status().message() +
                                                 "); give every rank transport.name = \"auto\"");
  if (blob->local_name != ctx->subs[kLocal].name || blob->fabric_name != ctx->subs[kFabric].name)
    return fail(CHORUS_ERR_INVALID_ARGUMENT,
                "endpoint_connect: rank " + std::to_string(ep->peer) + " uses auto with local '" +
                    blob->local_name + "' and fabric '" + blob->fabric_name +
                    "', this rank with '" + ctx->subs[kLocal].name + "' and '" +
                    ctx->subs[kFabric].name +
                    "'; give every rank the same transport.auto settings");
  const int slot = auto_use_local(ctx->host_id, blob->host_id) && !blob->local.empty() &&
                           ep->sub[kLocal] != nullptr
                       ? kLocal
                       : kFabric;
  int ignored = CHORUS_OK;
  ctx->close_sub_endpoint(*ep, 1 - slot, ignored);
  ep->chosen = slot;
  Sub& sub = ctx->subs[slot];
  const std::vector<std::byte>& theirs = slot == kLocal ? blob->local : blob->fabric;
  int rc = sub.tp->endpoint_connect(ep->sub[slot], theirs.data(), theirs.size(), timeout_ms);
  if (rc != CHORUS_OK)
    return fail(rc, std::string("endpoint_connect over ") + sub.name +
                        (slot == kLocal ? " (same host)" : " (other host)") + ": " +
                        sub.tp->last_error());
  log_host(CHORUS_LOG_DEBUG,
           "auto: rank " + std::to_string(ctx->rank) + " -> rank " + std::to_string(ep->peer) +
               " " + channel_name(ep->channel, ctx->data_channels) + " over " + sub.name);
  return CHORUS_OK;
}

int auto_endpoint_close(chorus_tp_endpoint_t* e) {
  if (!e) return fail(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_close: NULL endpoint");
  AutoEndpoint* ep = from(e);
  AutoContext* ctx = ep->owner;
  int rc = CHORUS_OK;
  for (int slot : {kLocal, kFabric}) ctx->close_sub_endpoint(*ep, slot, rc);
  std::erase_if(ctx->endpoints, [&](const auto& p) { return p.get() == ep; });
  return rc;
}

int auto_mem_register(chorus_tp_context_t* c, void* addr, size_t length, int mem_kind,
                      chorus_tp_mr_t** mr_out) {
  if (!c || !mr_out) return fail(CHORUS_ERR_INVALID_ARGUMENT, "mem_register: NULL argument");
  AutoContext* ctx = from(c);
  for (const Sub& sub : ctx->subs)
    if (mem_kind != CHORUS_MEM_HOST && !(sub.caps.flags & CHORUS_TP_CAP_MEM_CUDA))
      return fail(CHORUS_ERR_NOT_SUPPORTED,
                  "mem_register: memory kind " + std::to_string(mem_kind) +
                      " is not supported by sub-transport '" + sub.name + "'");
  auto mr = std::make_unique<AutoMr>();
  bool any = false;
  for (int slot : {kLocal, kFabric}) {
    Sub& sub = ctx->subs[slot];
    if (!sub.ctx || !(sub.caps.flags & CHORUS_TP_CAP_NEEDS_REGISTRATION)) continue;
    int rc = sub.tp->mem_register(sub.ctx, addr, length, mem_kind, &mr->sub[slot]);
    if (rc != CHORUS_OK) {
      int saved = sub.pass_on(rc, "mem_register");
      std::string why = t_error;
      for (int s = 0; s < slot; ++s)
        if (mr->sub[s]) ctx->subs[s].tp->mem_deregister(ctx->subs[s].ctx, mr->sub[s]);
      return fail(saved, why);
    }
    any = true;
  }
  if (!any) {
    *mr_out = nullptr;
    return CHORUS_OK;
  }
  ctx->mrs.insert(mr.get());
  *mr_out = reinterpret_cast<chorus_tp_mr_t*>(mr.release());
  return CHORUS_OK;
}

int auto_mem_deregister(chorus_tp_context_t* c, chorus_tp_mr_t* m) {
  if (!m) return CHORUS_OK;
  if (!c) return fail(CHORUS_ERR_INVALID_ARGUMENT, "mem_deregister: NULL context");
  AutoContext* ctx = from(c);
  AutoMr* mr = from(m);
  if (!ctx->mrs.erase(mr))
    return fail(CHORUS_ERR_INVALID_ARGUMENT, "mem_deregister: not a registration of this context");
  std::unique_ptr<AutoMr> owned(mr);
  int first = CHORUS_OK;
  for (int slot : {kLocal, kFabric}) {
    if (!mr->sub[slot]) continue;
    int rc = ctx->subs[slot].tp->mem_deregister(ctx->subs[slot].ctx, mr->sub[slot]);
    if (rc != CHORUS_OK && first == CHORUS_OK)
      first = ctx->subs[slot].pass_on(rc, "mem_deregister");
  }
  return first;
}

/// The connected sub-endpoint behind `e`, or a failure status.
int connected(chorus_tp_endpoint_t* e, const char* what, AutoEndpoint*& ep) {
  if (!e) return fail(CHORUS_ERR_INVALID_ARGUMENT, std::string(what) + ": NULL endpoint");
  ep = from(e);
  if (ep->chosen < 0)
    return fail(CHORUS_ERR_INVALID_ARGUMENT, std::string(what) + ": the endpoint to rank " +
                                                 std::to_string(ep->peer) +
                                                 " is not connected yet");
  if (!ep->sub[ep->chosen])
    return fail(CHORUS_ERR_INVALID_ARGUMENT, std::string(what) + ": the endpoint is closed");
  return CHORUS_OK;
}

int auto_post_send(chorus_tp_endpoint_t* e, const void* buf, size_t length, chorus_tp_mr_t* mr,
                   uint64_t wr_id) {
  AutoEndpoint* ep = nullptr;
  if (int rc = connected(e, "post_send", ep); rc != CHORUS_OK) return rc;
  const Sub& sub = ep->owner->subs[ep->chosen];
  int rc = sub.tp->post_send(ep->sub[ep->chosen], buf, length,
                             mr ? from(mr)->sub[ep->chosen] : nullptr, wr_id);
  return rc == CHORUS_OK ? rc : sub.pass_on(rc, "post_send");
}

int auto_post_recv(chorus_tp_endpoint_t* e, void* buf, size_t length, chorus_tp_mr_t* mr,
                   uint64_t wr_id) {
  AutoEndpoint* ep = nullptr;
  if (int rc = connected(e, "post_recv", ep); rc != CHORUS_OK) return rc;
  const Sub& sub = ep->owner->subs[ep->chosen];
  int rc = sub.tp->post_recv(ep->sub[ep->chosen], buf, length,
                             mr ? from(mr)->sub[ep->chosen] : nullptr, wr_id);
  return rc == CHORUS_OK ? rc : sub.pass_on(rc, "post_recv");
}

int auto_poll(chorus_tp_context_t* c, chorus_tp_completion_t* out, size_t max) {
  if (!c || (!out && max > 0)) return fail(CHORUS_ERR_INVALID_ARGUMENT, "poll: NULL argument");
  AutoContext* ctx = from(c);
  if (ctx->fds.active()) ctx->fds.drain_wake();
  if (ctx->pending_error >= 0) return CHORUS_ERR_PENDING;
  // Each endpoint lives in one sub-context, so merging the two streams keeps
  // every endpoint's completions in post order. Which sub-context goes first
  // alternates, so a busy one cannot starve the other when `max` is small.
  const int first = ctx->poll_first;
  ctx->poll_first ^= 1;
  size_t n = 0;
  for (int k = 0; k < 2 && n < max; ++k) {
    const int slot = first ^ k;
    Sub& sub = ctx->subs[slot];
    // A sub-context with no endpoint has nothing to report (a closed
    // endpoint's completions are dropped): skip its poll, which for tcp is a
    // system call, on every poll of a job that has no peer over it.
    if (!sub.ctx || sub.endpoints == 0) continue;
    int got = sub.tp->poll(sub.ctx, out + n, max - n);
    if (got == CHORUS_ERR_PENDING) {
      ctx->pending_error = slot;
      break;
    }
    if (got < 0) {
      // Completions already taken from the other sub-context would be lost
      // with this status; they are returned now and the failure stays sticky
      // in the sub-transport for the next poll.
      if (n > 0) break;
      return sub.pass_on(got, "poll");
    }
    for (size_t i = n; i < n + size_t(got); ++i)
      out[i].endpoint = ctx->outer(slot, out[i].endpoint);
    n += size_t(got);
  }
  if (n == 0 && ctx->pending_error >= 0) return CHORUS_ERR_PENDING;
  return int(n);
}

int auto_read_error(chorus_tp_context_t* c, chorus_tp_error_t* err_out) {
  if (!c || !err_out) return fail(CHORUS_ERR_INVALID_ARGUMENT, "read_error: NULL argument");
  AutoContext* ctx = from(c);
  const int order[2] = {ctx->pending_error >= 0 ? ctx->pending_error : kLocal,
                        ctx->pending_error >= 0 ? 1 - ctx->pending_error : kFabric};
  ctx->pending_error = -1;
  for (int slot : order) {
    Sub& sub = ctx->subs[slot];
    if (!sub.ctx) continue;
    chorus_tp_error_t err{};
    if (sub.tp->read_error(sub.ctx, &err) != CHORUS_OK) continue;
    err.endpoint = ctx->outer(slot, err.endpoint);
    err.message[sizeof err.message - 1] = '\0';
    std::string text = sub.name + ": " + err.message;
    std::snprintf(err.message, sizeof err.message, "%s", text.c_str());
    *err_out = err;
    return CHORUS_OK;
  }
  return fail(CHORUS_ERR_INVALID_ARGUMENT, "read_error: no failed completion to read");
}

int auto_wait(chorus_tp_context_t* c, int timeout_ms) {
  if (!c) return fail(CHORUS_ERR_INVALID_ARGUMENT, "wait: NULL context");
  AutoContext* ctx = from(c);
  if (ctx->interrupted.exchange(false)) return CHORUS_OK;
  std::vector<int> active;
  for (int slot : {kLocal, kFabric})
    if (ctx->subs[slot].endpoints > 0) active.push_back(slot);
  if (active.empty())  // nothing can complete; sleep where interrupt reaches
    active.push_back(ctx->has_local() ? kLocal : kFabric);
  auto sub_wait = [&](int slot, int ms) {
    Sub& sub = ctx->subs[slot];
    int rc = sub.tp->wait(sub.ctx, ms);
    return rc == CHORUS_OK || rc == CHORUS_ERR_TIMEOUT ? rc : sub.pass_on(rc, "wait");
  };
  // Both sub-contexts have a wait object: one epoll over both on this
  // thread. A sub-context may hold completions its fd no longer shows (taken
  // off the wire by a post or an earlier wait), so each gets a non-blocking
  // wait first; only then is sleeping on the fds safe.
  if (ctx->fds.active()) {
    for (int slot : {kLocal, kFabric})
      if (int rc = sub_wait(slot, 0); rc != CHORUS_ERR_TIMEOUT) return rc;
    if (ctx->interrupted.exchange(false)) return CHORUS_OK;
    const bool woke = ctx->fds.sleep(timeout_ms);
    ctx->fds.drain_wake();
    ctx->interrupted.store(false);  // the interrupt, if any, has woken this wait
    if (woke) return CHORUS_OK;
    return fail(CHORUS_ERR_TIMEOUT,
                "wait: no completion within " + std::to_string(timeout_ms) + " ms");
  }
  // One sub-transport in use: its own wait is exact.
  if (active.size() == 1 && ctx->subs[active[0]].can_interrupt())
    return sub_wait(active[0], timeout_ms);

  // Both in use (a job spanning hosts with several ranks per host): sleep in
  // both at once, the fabric's wait on a helper thread.
  if (active.size() == 2 && ctx->subs[kLocal].can_interrupt() &&
      ctx->subs[kFabric].can_interrupt()) {
    if (timeout_ms == 0) {
      int rc = sub_wait(kLocal, 0);
      return rc != CHORUS_ERR_TIMEOUT ? rc : sub_wait(kFabric, 0);
    }
    ctx->dual.caller_sub = &ctx->subs[kLocal];
    int rc = ctx->dual.wait(ctx->subs[kLocal], ctx->subs[kFabric], timeout_ms);
    ctx->interrupted.store(false);  // the interrupt, if any, has woken this wait
    return rc;
  }
  // A sub-transport without interrupt: sleep in slices of at most 1 ms in
  // the first and check the other without blocking in between, so a
  // completion on the second is seen up to 1 ms late while the rank is idle.
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
  for (;;) {
    int slice = 1;
    if (timeout_ms >= 0) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      slice = int(std::clamp<long long>(left, 0, 1));
    }
    int rc = sub_wait(active[0], slice);
    if (rc != CHORUS_ERR_TIMEOUT) return rc;
    for (size_t i = 1; i < active.size(); ++i)
      if (rc = sub_wait(active[i], 0); rc != CHORUS_ERR_TIMEOUT) return rc;
    if (ctx->interrupted.exchange(false)) return CHORUS_OK;
    if (timeout_ms >= 0 && Clock::now() >= deadline)
      return fail(CHORUS_ERR_TIMEOUT,
                  "wait: no completion within " + std::to_string(timeout_ms) + " ms");
  }
}

int auto_interrupt(chorus_tp_context_t* c) {
  if (!c) return fail(CHORUS_ERR_INVALID_ARGUMENT, "interrupt: NULL context");
  AutoContext* ctx = from(c);
  ctx->interrupted.store(true);
  if (ctx->fds.active()) {
    ctx->fds.wake();
    return CHORUS_OK;
  }
  for (Sub& sub : ctx->subs)
    if (sub.ctx && sub.can_interrupt()) sub.tp->interrupt(sub.ctx);
  return CHORUS_OK;
}

/// The composite's wait object: its epoll set, when both sub-contexts have
/// one. auto_poll drains both sub-contexts and the interrupt eventfd, so the
/// set obeys the drain rule as its members do.
int auto_wait_fd(chorus_tp_context_t* c, int* fd_out) {
  if (!c || !fd_out) return fail(CHORUS_ERR_INVALID_ARGUMENT, "wait_fd: NULL argument");
  AutoContext* ctx = from(c);
  if (!ctx->fds.active())
    return fail(CHORUS_ERR_NOT_SUPPORTED,
                "wait_fd: a sub-transport of this context has no wait object");
  *fd_out = ctx->fds.fd();
  return CHORUS_OK;
}

const chorus_transport_plugin_v1_t kTable = {
    sizeof(chorus_transport_plugin_v1_t),
    CHORUS_TRANSPORT_ABI_MINOR,
    kAutoTransportName,
    auto_init,
    nullptr,
    auto_last_error,
    auto_context_open,
    auto_context_close,
    auto_get_caps,
    auto_endpoint_open,
    auto_endpoint_connect,
    auto_endpoint_close,
    auto_mem_register,
    auto_mem_deregister,
    auto_post_send,
    auto_post_recv,
    auto_poll,
    auto_read_error,
    auto_wait,
    auto_interrupt,
    nullptr,
    auto_wait_fd,
};

}  // namespace

const chorus_transport_plugin_v1_t* auto_transport_table() { return &kTable; }

int auto_transport_helper_threads() { return g_helper_threads.load(std::memory_order_relaxed); }

std::shared_ptr<Plugin> auto_transport_plugin() {
  static const std::shared_ptr<Plugin> plugin = [] {
    auto p = std::make_shared<Plugin>();
    p->kind_ = PluginKind::kTransport;
    p->name_ = kAutoTransportName;
    p->path_ = "(built into libchorus)";
    p->transport_ = &kTable;
    kTable.init(plugin_host());
    return p;
  }();
  return plugin;
}

std::pair<std::string, std::string> auto_transport_names(const Config& cfg) {
  std::pair<std::string, std::string> names{"shm", "tcp"};
  if (auto it = cfg.transport_settings.find(kAutoTransportName); it != cfg.transport_settings.end())
    for (const Setting& s : it->second) {
      if (s.key == "local") names.first = s.value;
      if (s.key == "fabric") names.second = s.value;
    }
  return names;
}

bool auto_local_is_explicit(const Config& cfg) {
  auto it = cfg.transport_settings.find(kAutoTransportName);
  return it != cfg.transport_settings.end() &&
         std::any_of(it->second.begin(), it->second.end(),
                     [](const Setting& s) { return s.key == "local"; });
}

std::vector<Setting> auto_transport_settings(const Config& cfg) {
  std::vector<Setting> out;
  if (auto it = cfg.transport_settings.find(kAutoTransportName); it != cfg.transport_settings.end())
    out = it->second;
  auto [local, fabric] = auto_transport_names(cfg);
  for (const std::string& sub : {local, fabric})
    if (auto it = cfg.transport_settings.find(sub); it != cfg.transport_settings.end())
      for (const Setting& s : it->second) out.push_back({sub + "." + s.key, s.value, s.origin});
  std::string path;
  for (const auto& p : cfg.plugin_path) path += (path.empty() ? "" : ":") + p;
  if (!path.empty()) out.push_back({"plugin_path", path, "plugin_path"});
  return out;
}

std::vector<std::pair<std::string, std::vector<int>>> auto_transport_peers(chorus_tp_context_t* c) {
  std::vector<std::pair<std::string, std::vector<int>>> out;
  if (!c) return out;
  AutoContext* ctx = from(c);
  std::set<int> peers[2];
  for (const auto& ep : ctx->endpoints)
    if (ep->chosen >= 0) peers[ep->chosen].insert(ep->peer);
  for (int slot : {kLocal, kFabric})
    out.emplace_back(ctx->subs[slot].name,
                     std::vector<int>(peers[slot].begin(), peers[slot].end()));
  return out;
}

std::string auto_transport_summary(
    const std::vector<std::pair<std::string, std::vector<int>>>& peers) {
  std::string s;
  for (const auto& [name, ranks] : peers) {
    if (ranks.empty()) continue;
    s += (s.empty() ? "" : "; ") + name + " to rank" + (ranks.size() > 1 ? "s " : " ") +
         auto_rank_list(ranks);
  }
  return s.empty() ? "no peers" : s;
}

std::string auto_host_identity() {
  char host[HOST_NAME_MAX + 1] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  struct stat st {};
  std::string shm_dev = ::stat("/dev/shm", &st) == 0 ? std::to_string(uint64_t(st.st_dev)) : "?";
  return "boot=" + read_first_line("/proc/sys/kernel/random/boot_id") + " host=" + host +
         " netns=" + namespace_inode("/proc/self/ns/net") +
         " pidns=" + namespace_inode("/proc/self/ns/pid") + " shm=" + shm_dev;
}

std::string auto_rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ",";
    if (j - i >= 2) {
      s += std::to_string(ranks[i]) + ".." + std::to_string(ranks[j]);
    } else {
      for (size_t k = i; k <= j; ++k) s += (k > i ? "," : "") + std::to_string(ranks[k]);
    }
    i = j + 1;
  }
  return s;
}

size_t auto_blob_overhead() {
  return sizeof kMagic + 2 + kAutoMaxHostId + 2 * (1 + kMaxName) + 2 * 4;
}

Result<std::vector<std::byte>> auto_blob_encode(const AutoBlob& blob) {
  if (blob.host_id.size() > kAutoMaxHostId || blob.local_name.size() > kMaxName ||
      blob.fabric_name.size() > kMaxName)
    return Status(CHORUS_ERR_INVALID_ARGUMENT,
                  "host identity or transport name too long for the address");
  if (blob.local.size() > UINT32_MAX || blob.fabric.size() > UINT32_MAX)
    return Status(CHORUS_ERR_INVALID_ARGUMENT, "sub-transport address too long");
  std::vector<std::byte> out;
  for (unsigned char m : kMagic) out.push_back(std::byte(m));
  out.push_back(std::byte(kVersion));
  put_u8_field(out, blob.host_id);
  put_u8_field(out, blob.local_name);
  put_u8_field(out, blob.fabric_name);
  put_u32_field(out, blob.local);
  put_u32_field(out, blob.fabric);
  return out;
}

Result<AutoBlob> auto_blob_decode(std::span<const std::byte> data) {
  Reader r(data);
  std::span<const std::byte> magic, version;
  if (!r.bytes(4, magic) || std::memcmp(magic.data(), kMagic, 4) != 0)
    return Status(CHORUS_ERR_INVALID_ARGUMENT, "bad magic");
  if (!r.bytes(1, version) || uint8_t(version[0]) != kVersion)
    return Status(CHORUS_ERR_INVALID_ARGUMENT, "unsupported version");
  AutoBlob b;
  if (!r.u8_string(b.host_id) || !r.u8_string(b.local_name) || !r.u8_string(b.fabric_name) ||
      !r.u32_blob(b.local) || !r.u32_blob(b.fabric))
    return Status(CHORUS_ERR_INVALID_ARGUMENT, "truncated");
  if (!r.at_end()) return Status(CHORUS_ERR_INVALID_ARGUMENT, "trailing bytes");
  return b;
}

}  // namespace chorus::core
