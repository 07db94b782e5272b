// Context: one communicator's TCP transport state — listener, completion
// queue, epoll set and endpoints.
#pragma once

#include "tcp.h"
#include "tcp_acceptor.h"
#include "tcp_config.h"
#include "tcp_endpoint.h"

#include <chorus/transport.h>
#include <chorus/provider/context_base.hpp>
#include <chorus/provider/receive_buffer_check.hpp>

#include <sys/epoll.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace chorus::tcp {

/// Progress model (libfabric's "manual progress"): data moves only inside
/// poll(), wait() and the posts. poll() does one non-blocking epoll_wait and
/// progresses the endpoints it names; wait() sleeps in epoll_wait on every
/// data socket plus an eventfd (for interrupt()) and progresses whatever
/// wakes it. Sockets are edge-triggered, so an idle wait really sleeps.
///
/// Threading: one caller thread at a time (the ABI's rule); interrupt() from
/// any thread. The acceptor runs its own thread and meets the caller only in
/// Acceptor::take().
class Context : public provider::ConfiguredContext<Config> {
 public:
  /// Throws Error (INVALID_ARGUMENT for bad info/config, SYSTEM for the OS).
  explicit Context(const chorus_tp_context_info_t& info);
  ~Context();

  /// The job key from context_open (empty when the core passed none).
  const auth::Key& job_key() const { return job_key_; }
  Acceptor& acceptor() { return *acceptor_; }
  std::span<std::byte> discard_buffer() { return discard_; }
  /// Lends an endpoint a staging buffer of `size` bytes (its contents are
  /// garbage) until it gives it back with return_stage. Caller thread only.
  std::vector<std::byte> take_stage(std::size_t size);
  void return_stage(std::vector<std::byte>&& stage);
  /// Which receive buffers are writable memory (docs/transport-abi.md,
  /// provider toolkit); shared by the endpoints, caller thread only.
  provider::ReceiveBufferCheck& receive_buffer_check() { return receive_buffer_check_; }
  /// "host:port" other ranks connect to, for messages.
  std::string listen_address() const;

  /// Adds a connected data socket to the epoll set (edge-triggered). Throws.
  void watch(int fd, Socket* socket);
  void unwatch(int fd);

  chorus_tp_caps_t caps() const;
  Endpoint* open_endpoint(int peer_rank, int channel, void* address_out, std::size_t* address_len);
  void close_endpoint(Endpoint* ep);

  int poll(chorus_tp_completion_t* out, std::size_t max);
  int read_error(chorus_tp_error_t* out);
  int wait(int timeout_ms);
  int interrupt();
  /// The wait object (transport.h, minor 4): the epoll set wait() sleeps
  /// in. Every socket event and the interrupt eventfd make it readable, and
  /// poll() drains it (drive(0)) whenever its queue runs empty, so it obeys
  /// the drain rule without any work of its own.
  int wait_fd(int* fd_out) {
    *fd_out = epoll_fd_.get();
    return CHORUS_OK;
  }

 private:
  /// One epoll_wait (timeout as epoll_wait's) and progress of every endpoint
  /// it names. Returns true when the interrupt eventfd fired.
  bool drive(int timeout_ms);
  /// Moves the acceptor's connect requests into the completion queue, as
  /// CHORUS_TP_OP_CONNECT_REQUEST completions of endpoints not yet being
  /// connected. The acceptor wakes wait()/wait_fd through the interrupt
  /// eventfd when it queues one.
  void report_connect_requests();

  static constexpr int kMaxEvents = 64;

  /// More ranks than usable cores: spin passes yield the core.
  bool oversubscribed_ = false;
  auth::Key job_key_;
  asio::ip::address advertised_;
  std::vector<std::byte> discard_;
  // Staging buffers no endpoint holds. Usually one: an endpoint holds one
  // during its progress_rx, and after it only while more than a small
  // message's worth of bytes stays staged (Endpoint::stage_). At most
  // kSpareStages are kept; more are freed.
  static constexpr std::size_t kSpareStages = 4;
  std::vector<std::vector<std::byte>> spare_stages_;
  provider::ReceiveBufferCheck receive_buffer_check_;
  UniqueFd epoll_fd_;
  UniqueFd event_fd_;
  std::vector<epoll_event> events_;
  std::vector<Endpoint*> to_progress_;
  std::unique_ptr<Acceptor> acceptor_;
  std::vector<std::unique_ptr<chorus_tp_endpoint>> endpoints_;
};

}  // namespace chorus::tcp

/// The ABI's opaque context handle is the Context itself.
struct chorus_tp_context final : chorus::tcp::Context {
  using Context::Context;
};
