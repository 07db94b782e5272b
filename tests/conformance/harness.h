// The conformance harness: loads the transport plugin under test and gives
// the test cases small RAII helpers over its C ABI. It depends on nothing in
// Chorus but <chorus/transport.h>, so a third-party plugin is tested exactly
// like the built-in ones (see docs/transport-abi.md).
//
// Helpers throw std::runtime_error (with the plugin's last_error text) when
// a call that is not itself under test fails; Catch reports that as a
// failure of the running case. They use no Catch macros, so they also work in
// forked peer processes and helper threads.
#pragma once

#include <chorus/transport.h>

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace chorus::conformance {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<unsigned char>;
using Kvs = std::vector<std::pair<std::string, std::string>>;

/// The job key (chorus_tp_context_info_t::job_key, minor 2) every Context of
/// the suite passes; transport-specific cases use it to forge handshakes.
inline constexpr char kConformanceJobKey[] = "conformance-suite-job-key";

// ---- the plugin under test ---------------------------------------------------

/// Loaded once per process, on first use (before any fork, so peers share
/// it). Selection, in order: CHORUS_CONFORMANCE_PLUGIN (a path);
/// libchorus-transport-<CHORUS_CONFORMANCE_TRANSPORT, default tcp>.so in each
/// directory of CHORUS_PLUGIN_PATH, then in the build tree's plugin folder.
class Plugin {
 public:
  static Plugin& get();

  const chorus_transport_plugin_v1_t& ops() const { return *ops_; }
  const std::string& transport() const { return transport_; }
  const std::string& path() const { return path_; }
  void* dl_handle() const { return handle_; }
  /// kv entries from CHORUS_CONFORMANCE_CONFIG="k=v,k=v" (origin
  /// "env CHORUS_CONFORMANCE_CONFIG"); every context gets them.
  const Kvs& env_config() const { return env_config_; }
  bool has_interrupt() const;
  /// bind_address for every context: CHORUS_CONFORMANCE_BIND_ADDRESS, else 127.0.0.1.
  const char* bind_address() const { return bind_address_.c_str(); }

  /// Lines the plugin logged through the host table (all levels).
  std::vector<std::string> logs() const;
  void clear_logs();

 private:
  Plugin();
  void* handle_ = nullptr;
  const chorus_transport_plugin_v1_t* ops_ = nullptr;
  std::string transport_;
  std::string path_;
  std::string bind_address_ = "127.0.0.1";
  Kvs env_config_;
};

inline const chorus_transport_plugin_v1_t& tp() { return Plugin::get().ops(); }

std::string status_name(int status);
/// The plugin's last_error() on this thread, never NULL.
std::string last_error();
/// Throws std::runtime_error("<what>: <status> (<last_error>)") unless rc == CHORUS_OK.
void check(int rc, const std::string& what);

// ---- contexts, endpoints, registrations -----------------------------------------

/// What a Context says in chorus_tp_context_info_t besides rank, size,
/// address, configuration and the job key.
struct InfoOptions {
  /// The struct_size it claims; 0 for sizeof. A smaller size (ending at a
  /// field an older minor appended) acts as a core built against that minor:
  /// the fields past it hold values the plugin must not read.
  std::size_t struct_size = 0;
  /// data_channels (minor 3); 0 says nothing.
  int data_channels = 0;
};

/// An open context plus the completions pumped out of it so far.
class Context {
 public:
  /// Opens rank `rank` of `size` on Plugin::bind_address() with the env
  /// config plus `extra`.
  Context(int rank, int size, const Kvs& extra = {}, const InfoOptions& options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  chorus_tp_context_t* get() const { return ctx_; }
  const chorus_tp_caps_t& caps() const { return caps_; }
  int rank() const { return rank_; }
  /// Closes now and returns the status (the destructor then does nothing).
  int close();

  /// One poll(); a PENDING result is read with read_error. Returns the number
  /// of entries (successes + failures) gathered. Throws on other errors.
  std::size_t pump();
  std::vector<chorus_tp_completion_t> completions;
  std::vector<chorus_tp_error_t> errors;

  std::size_t count(chorus_tp_endpoint_t* ep, std::uint32_t opcode) const;

 private:
  chorus_tp_context_t* ctx_ = nullptr;
  chorus_tp_caps_t caps_{};
  int rank_ = 0;
};

struct Endpoint {
  Context* ctx = nullptr;
  chorus_tp_endpoint_t* ep = nullptr;
  int peer = -1;
  int channel = 0;
  Bytes blob;
};

Endpoint open_endpoint(Context& ctx, int peer, int channel);
/// Returns endpoint_connect's status.
int connect_endpoint(Endpoint& ep, const Bytes& peer_blob, int timeout_ms);
/// Connects two endpoints of the same process, the second from a helper
/// thread (connect blocks until the pair is up). Throws on failure.
void connect_pair(Endpoint& x, Endpoint& y, int timeout_ms = 10000);

/// A registered buffer; mr() may be NULL when the transport needs none.
class Registration {
 public:
  Registration(Context& ctx, void* addr, std::size_t length);
  ~Registration();
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  chorus_tp_mr_t* mr() const { return mr_; }

 private:
  Context& ctx_;
  chorus_tp_mr_t* mr_ = nullptr;
};

/// Two contexts of one process (ranks 0 and 1 of 2) with `channels`
/// endpoints between them, connected.
struct Pair {
  explicit Pair(int channels = 1, const Kvs& extra = {});
  Context a;
  Context b;
  std::vector<Endpoint> ea;  // rank 0's endpoints, by channel
  std::vector<Endpoint> eb;  // rank 1's endpoints, by channel
};

/// Pumps every context until `done()` or `timeout_ms`. With one context it
/// sleeps in wait() between polls; with several (one thread driving both ends
/// of an in-process pair) it polls them round-robin. Returns done().
bool pump_until(const std::vector<Context*>& ctxs, const std::function<bool()>& done,
                int timeout_ms);

// ---- data ------------------------------------------------------------------

/// A deterministic byte pattern, different per seed and per offset.
void fill_pattern(void* buf, std::size_t n, std::uint32_t seed);
/// Index of the first byte that differs from the pattern, if any.
std::optional<std::size_t> pattern_mismatch(const void* buf, std::size_t n, std::uint32_t seed);

// ---- peer processes ----------------------------------------------------------

/// One end of a framed control channel (a socketpair) between the test and
/// a forked peer. Messages are (tag, bytes).
class Control {
 public:
  explicit Control(int fd = -1) : fd_(fd) {}
  Control(Control&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Control& operator=(Control&& o) noexcept;
  ~Control();
  void send(const std::string& tag, const Bytes& data = {});
  /// Waits for the next message; throws on timeout, EOF, or when it is not
  /// `tag` (an "error" message from the peer is rethrown with its text).
  Bytes expect(const std::string& tag, int timeout_ms = 20000);

 private:
  int fd_ = -1;
};

/// A forked peer process running `body`. The body must not use Catch; it
/// reports failure by throwing (sent to the parent as an "error" message and
/// exit status 1). The child never returns into the test runner.
class ChildProcess {
 public:
  explicit ChildProcess(const std::function<void(Control&)>& body);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  Control& control() { return control_; }
  pid_t pid() const { return pid_; }
  void kill(int sig);
  /// Waits up to `timeout_ms` for the exit status (128+signal if killed);
  /// on timeout kills the child and returns -1.
  int join(int timeout_ms = 20000);

 private:
  pid_t pid_ = -1;
  Control control_;
};

/// Process CPU time (all threads, user + system) so far, for "did it spin".
std::chrono::microseconds cpu_time();

/// Milliseconds since `t0`.
inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

}  // namespace chorus::conformance
