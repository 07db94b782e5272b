// Endpoint: its address blob, connecting it (blocking or polled, P3/P10 of
// docs/transport-abi.md) and the connect request a peer's polled connect
// raises on it.
#include "shm_endpoint.h"

#include <chorus/transport_names.hpp>
#include "shm.h"
#include "shm_arena.h"
#include "shm_context.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace chorus::shm {

namespace {

int pidfd_open(int pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

Blob Endpoint::blob() const {
  const HostIdentity& id = HostIdentity::local();
  Blob b{};
  b.magic = kBlobMagic;
  b.version = kLayoutVersion;
  b.size = sizeof(Blob);
  b.rank = ctx_.rank();
  b.peer = peer_;
  b.channel = channel_;
  b.pid = own_seg_.header()->owner_pid;
  b.nonce = nonce_;
  b.pid_ns = id.pid_ns;
  b.shm_dev = id.shm_dev;
  std::memcpy(b.boot_id, id.boot_id, sizeof b.boot_id);
  b.offset = own_seg_.offset();
  b.ring_capacity = own_seg_.header()->ring_capacity;
  b.arena_nonce = ctx_.arena().header()->nonce;
  std::snprintf(b.name, sizeof b.name, "%s", ctx_.arena().name().c_str());
  return b;
}

void Endpoint::connect(const void* peer_blob, std::size_t length, int timeout_ms) {
  if (connected_) {
    if (timeout_ms == 0) return;  // P10: a polled connect says OK again
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "endpoint to " + peer_name() + " is already connected");
  }
  connect_called_ = true;  // from now on no connect request is raised here
  if (length != sizeof(Blob)) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "address of " + std::to_string(length) + " bytes for " + peer_name() +
                    " is not a shm address (those are " + std::to_string(sizeof(Blob)) +
                    " bytes); do both ranks use transport 'shm'?");
  }
  Blob b;
  std::memcpy(&b, peer_blob, sizeof b);
  const std::string fd_dir = "/proc/" + std::to_string(b.pid) + "/fd/";
  const bool named = std::memchr(b.name, '\0', sizeof b.name) != nullptr &&
                     std::strncmp(b.name, fd_dir.c_str(), fd_dir.size()) == 0;
  if (b.magic != kBlobMagic || b.version != kLayoutVersion || b.size != sizeof(Blob) || !named) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "the address given for " + peer_name() +
                    " is not a shm address (bad magic, version or segment name)");
  }
  if (b.rank != peer_ || b.peer != ctx_.rank() || b.channel != channel_) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "the address given for " + peer_name() + " belongs to rank " +
                    std::to_string(b.rank) + "'s endpoint to " +
                    endpoint_name(b.peer, b.channel, ctx_.data_channels()) +
                    ", not to this endpoint (rank " + std::to_string(ctx_.rank()) + ")");
  }
  const HostIdentity& id = HostIdentity::local();
  if (std::memcmp(b.boot_id, id.boot_id, sizeof b.boot_id) != 0) {
    throw Error(CHORUS_ERR_UNAVAILABLE,
                peer_name() +
                    " runs on another host (its boot id differs); the shm transport "
                    "connects ranks of one host only: use tcp or a fabric across hosts");
  }
  if (b.pid_ns != id.pid_ns || b.shm_dev != id.shm_dev) {
    throw Error(CHORUS_ERR_UNAVAILABLE,
                peer_name() +
                    " is on this host but in another container (different pid "
                    "namespace or /dev/shm); run the ranks in one container or use tcp");
  }
  // A polled connect asks the peer to connect too, unless it already has
  // (it attached our segment in its own connect).
  const bool request =
      timeout_ms == 0 && own_seg_.header()->attached.load(std::memory_order_acquire) == 0;
  Segment seg = Segment::attach(b, request);
  const int pidfd = pidfd_open(b.pid);
  if (pidfd < 0 && errno == ESRCH) {
    throw Error(CHORUS_ERR_PEER_LOST,
                peer_name() + " has exited (pid " + std::to_string(b.pid) + " no longer exists)");
  }
  // Cross-memory attach: can this process read the peer's memory? The
  // peer's segment says where its probe word is; finding the peer's nonce
  // there proves it. The answer goes into our segment, where the peer's
  // sends look for it.
  std::uint32_t cma = 2;
  if (ctx_.config().cma != CmaMode::kOff) {
    std::uint64_t probe = 0;
    const int err = cma_read(b.pid, &probe, seg.header()->probe_addr, sizeof probe);
    if (err == 0 && probe == b.nonce) {
      cma = 1;
    } else if (ctx_.config().cma == CmaMode::kOn) {
      if (pidfd >= 0) ::close(pidfd);
      throw Error(CHORUS_ERR_UNAVAILABLE,
                  "transport.shm.cma = on, but process_vm_readv from " + peer_name() +
                      " failed: " + (err != 0 ? errno_text(err) : std::string("wrong data")) +
                      " (ptrace permission: same user and kernel.yama.ptrace_scope = 0, or "
                      "CAP_SYS_PTRACE); set cma = auto to copy through the ring instead");
    } else {
      ctx_.note_cma_refused(peer_name(), err != 0 ? errno_text(err) : std::string("wrong data"));
    }
  }
  own_seg_.populate_ring();
  bind_peer(std::move(seg), b.pid, pidfd, cma);
}

bool Endpoint::take_connect_request() noexcept {
  if (connect_called_ || request_raised_) return false;
  if (own_seg_.header()->connect_request.load(std::memory_order_acquire) == 0) return false;
  request_raised_ = true;
  return true;
}

}  // namespace chorus::shm
