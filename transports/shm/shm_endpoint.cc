#include "shm_endpoint.h"

#include <chorus/transport_names.hpp>
#include "shm.h"
#include "shm_context.h"
#include "shm_futex.h"

#include <poll.h>
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <new>

namespace chorus::shm {

namespace {

/// Every frame starts on a 64-byte boundary with this header; the payload
/// follows it and may wrap around the end of the ring. A header never wraps:
/// the capacity is a multiple of 64. Every frame of a message carries its
/// immediate (0 for a plain post_send); the receiver takes it from the first
/// frame (kFirst or kByRef). With up to 32 payload bytes a message is one
/// frame in one cache line.
///
/// `stamp` is what publishes a frame (layout 4; before, a `head` counter on
/// a line of its own did): the producer writes the rest of the frame, then
/// stores the frame's stamp with release; the consumer polls the stamp at
/// its tail with acquire. So a small message costs the consumer one cache
/// line from the producer's core instead of two in a row (the counter, then
/// the frame). The stamp is the frame's absolute ring position XOR a salt
/// (the receiving segment's nonce, top bit set): a stamp left from an
/// earlier lap never matches (other position), nor does the zeroed ring;
/// stale payload bytes match only if they equal this 64-bit value, which
/// depends on the secret nonce (docs/shm.md, "Rings").
struct FrameHeader {
  std::uint64_t stamp;     // written last, atomically (release)
  std::uint64_t msg_len;   // whole message
  std::uint32_t frag_len;  // payload bytes in this frame (16 for kByRef)
  std::uint32_t kind;
  std::uint32_t imm;       // the sender's immediate (transport ABI minor 5)
  std::uint32_t reserved;  // 0
};
static_assert(sizeof(FrameHeader) == 32);
static_assert(offsetof(FrameHeader, stamp) == 0);

/// The salt of a ring's stamps: its segment's nonce with the top bit set, so
/// that no stamp is 0 (ring positions stay below 2^63).
constexpr std::uint64_t stamp_salt(std::uint64_t nonce) { return nonce | (std::uint64_t{1} << 63); }

/// The stamp word of the frame at `pos` (64-byte aligned; never wraps).
std::atomic_ref<std::uint64_t> stamp_at(unsigned char* ring, std::uint64_t cap, std::uint64_t pos) {
  return std::atomic_ref<std::uint64_t>(
      *reinterpret_cast<std::uint64_t*>(ring + (pos & (cap - 1))));
}

enum : std::uint32_t {
  kFirst = 1,  // first (maybe only) fragment of an inline message
  kMore = 2,   // a later fragment of the same message
  kByRef = 3,  // descriptor of a message to read with process_vm_readv
};

/// Payload of a kByRef frame.
struct ByRef {
  std::uint64_t addr;  // the send buffer, in the sender's address space
  std::uint64_t seq;   // acknowledged through rndv_done
};

/// Fragments smaller than this are not started while a larger remainder
/// waits for space (tiny fragments would only add per-frame overhead).
constexpr std::uint64_t kMinFragment = 4096;

constexpr std::uint64_t frame_bytes(std::uint64_t payload) {
  return (sizeof(FrameHeader) + payload + 63) & ~std::uint64_t{63};
}

void ring_write(unsigned char* ring, std::uint64_t cap, std::uint64_t pos, const void* src,
                std::uint64_t n) {
  if (n == 0) return;  // an empty message may come with a null buffer
  const std::uint64_t off = pos & (cap - 1);
  const std::uint64_t first = std::min(n, cap - off);
  std::memcpy(ring + off, src, first);
  if (n > first) std::memcpy(ring, static_cast<const unsigned char*>(src) + first, n - first);
}

void ring_read(const unsigned char* ring, std::uint64_t cap, std::uint64_t pos, void* dst,
               std::uint64_t n) {
  if (n == 0) return;  // an empty receive may have a null buffer
  const std::uint64_t off = pos & (cap - 1);
  const std::uint64_t first = std::min(n, cap - off);
  std::memcpy(dst, ring + off, first);
  if (n > first) std::memcpy(static_cast<unsigned char*>(dst) + first, ring, n - first);
}

/// Writes the frame `fh` (its stamp excepted) and `n` payload bytes at
/// `pos`, then publishes it by storing its stamp with release.
void write_frame(unsigned char* ring, std::uint64_t cap, std::uint64_t salt, std::uint64_t pos,
                 const FrameHeader& fh, const void* payload, std::uint64_t n) {
  constexpr std::size_t kSkip = sizeof fh.stamp;
  ring_write(ring, cap, pos + kSkip, reinterpret_cast<const unsigned char*>(&fh) + kSkip,
             sizeof fh - kSkip);
  ring_write(ring, cap, pos + sizeof fh, payload, n);
  static_assert(std::atomic_ref<std::uint64_t>::required_alignment <= 64);
  stamp_at(ring, cap, pos).store(pos ^ salt, std::memory_order_release);
}

}  // namespace

int cma_read(int pid, void* dst, std::uint64_t addr, std::uint64_t len) {
  std::uint64_t done = 0;
  while (done < len) {
    const std::uint64_t chunk = std::min<std::uint64_t>(len - done, std::uint64_t{1} << 30);
    iovec local{static_cast<unsigned char*>(dst) + done, chunk};
    iovec remote{reinterpret_cast<void*>(addr + done), chunk};
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EFAULT;
    done += static_cast<std::uint64_t>(n);
  }
  return 0;
}

Endpoint::Endpoint(Context& ctx, int peer, int channel)
    : ctx_(ctx), peer_(peer), channel_(channel), nonce_(random_u64()), probe_word_(nonce_) {
  own_seg_ = Segment::create(ctx.arena(), nonce_, ctx.rank(), peer, channel, ctx.config().ring_size,
                             reinterpret_cast<std::uintptr_t>(&probe_word_));
}

Endpoint::~Endpoint() {
  // The peer sees the flag (and its bell) and fails its posts. The Segment
  // destructors unmap both segments and return ours to the arena.
  if (SegmentHeader* h = own_seg_.header()) h->closed.store(1, std::memory_order_seq_cst);
  if (connected_) notify_peer();
  if (pidfd_ >= 0) ::close(pidfd_);
}

std::string Endpoint::peer_name() const {
  return "rank " + std::to_string(peer_) + " (" + channel_name(channel_, ctx_.data_channels()) +
         (peer_pid_ > 0 ? ", pid " + std::to_string(peer_pid_) : std::string()) + ")";
}

void Endpoint::bind_peer(Segment seg, int pid, int pidfd, std::uint32_t cma) noexcept {
  peer_pid_ = pid;
  pidfd_ = pidfd;
  peer_seg_ = std::move(seg);
  own_seg_.set_peer_pid(pid);
  tx_cap_ = peer_seg_.header()->ring_capacity;
  tx_frag_max_ = tx_cap_ / 4 - sizeof(FrameHeader);
  tx_head_ = 0;  // a ring is new with its segment: the first frame goes at 0
  tx_salt_ = stamp_salt(peer_seg_.header()->nonce);
  tx_tail_seen_ = peer_seg_.header()->tail.load(std::memory_order_acquire);
  own_seg_.header()->cma_ok.store(cma, std::memory_order_release);
  connected_ = true;
  next_peer_check_ = Clock::now();
  notify_peer();  // its large sends may be waiting for cma_ok
}

int Endpoint::enqueue_send(const void* buf, std::size_t length, std::uint64_t wr_id,
                           std::uint32_t imm) noexcept {
  if (failed_) return set_last_error(CHORUS_ERR_PEER_LOST, "post_send: " + fail_text_);
  if (buf == nullptr && length > 0) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "post_send: NULL buffer of " + std::to_string(length) + " bytes");
  }
  if (sends_unreaped_ >= kMaxOutstanding) {
    return set_last_error(CHORUS_ERR_AGAIN, "post_send: " + std::to_string(kMaxOutstanding) +
                                                " sends outstanding to " + peer_name());
  }
  try {
    sends_.push({static_cast<const unsigned char*>(buf), length, wr_id, 0, 0, 0, imm});
  } catch (const std::bad_alloc&) {  // the queue's first push allocates it
    return set_last_error(CHORUS_ERR_SYSTEM, "post_send: out of memory for the send queue");
  }
  ++sends_unreaped_;
  // Rung by the next progress(): a locked increment now would wait for the
  // frame's line to leave the peer polling it (docs/shm.md); at once when the
  // peer is asleep, not polling.
  if (connected_ && progress_sends()) notify_owed_ = true;
  ring_if_asleep();
  return CHORUS_OK;
}

int Endpoint::post_recv(void* buf, std::size_t length, std::uint64_t wr_id) noexcept {
  if (failed_) return set_last_error(CHORUS_ERR_PEER_LOST, "post_recv: " + fail_text_);
  if (buf == nullptr && length > 0) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "post_recv: NULL buffer of " + std::to_string(length) + " bytes");
  }
  if (recvs_unreaped_ >= kMaxOutstanding) {
    return set_last_error(CHORUS_ERR_AGAIN, "post_recv: " + std::to_string(kMaxOutstanding) +
                                                " receives outstanding from " + peer_name());
  }
  // Checked now, while nothing depends on it, so that the copy out of the
  // ring (memcpy) never meets a bad pointer; a reused buffer costs no
  // system call (ReceiveBufferCheck).
  const int fault = ctx_.receive_buffer_check().check(buf, length);
  try {
    recvs_.push({static_cast<unsigned char*>(buf), length, wr_id, fault});
  } catch (const std::bad_alloc&) {  // the queue's first push allocates it
    return set_last_error(CHORUS_ERR_SYSTEM, "post_recv: out of memory for the receive queue");
  }
  ++recvs_unreaped_;
  if (connected_ && progress_recvs()) notify_owed_ = true;  // rung as for a send
  ring_if_asleep();
  return CHORUS_OK;
}

void Endpoint::reaped(std::uint32_t opcode) noexcept {
  if (opcode == CHORUS_TP_SEND) {
    --sends_unreaped_;
  } else if (opcode == CHORUS_TP_RECV) {
    --recvs_unreaped_;
  }  // a connect request holds no slot
}

void Endpoint::set_sleeping(bool on) noexcept {
  own_seg_.header()->sleeping.store(on ? 1 : 0, std::memory_order_seq_cst);
}

void Endpoint::notify_peer() noexcept {
  SegmentHeader* h = peer_seg_.header();
  if (h == nullptr) return;
  notify_owed_ = false;  // this ring covers what earlier posts owed
  // Pairs with the sleeper's "sleeping = 1; read bell; check rings": either
  // it sees our frame, or we see its flag and wake it.
  h->bell.fetch_add(1, std::memory_order_seq_cst);
  if (h->sleeping.load(std::memory_order_seq_cst) != 0) futex_wake_all(&h->bell, false);
}

void Endpoint::ring_if_asleep() noexcept {
  // A sleeping peer is not polling the frame's line, so the ring costs no
  // wait, and without it the peer would sleep until this rank's next poll or
  // wait (a program that posts and then computes). If the peer falls asleep
  // just after this load, the owed ring still comes with that poll or wait.
  SegmentHeader* h = notify_owed_ ? peer_seg_.header() : nullptr;
  if (h != nullptr && h->sleeping.load(std::memory_order_relaxed) != 0) notify_peer();
}

bool Endpoint::progress(Clock::time_point now) noexcept {
  if (!connected_ || failed_) return false;
  bool moved = progress_recvs();
  moved = progress_sends() || moved;
  if (moved || notify_owed_) notify_peer();
  return check_peer(now) || moved;
}

bool Endpoint::progress_sends() noexcept {
  SegmentHeader* ph = peer_seg_.header();
  unsigned char* ring = peer_seg_.ring();
  const Config& cfg = ctx_.config();
  bool moved = false;
  auto space = [&] { return tx_cap_ - (tx_head_ - tx_tail_seen_); };
  auto refresh_tail = [&] {
    const std::uint64_t t = ph->tail.load(std::memory_order_acquire);
    if (t < tx_tail_seen_ || t > tx_head_) return false;  // the peer broke the ring
    tx_tail_seen_ = t;
    return true;
  };
  while (tx_cursor_ < sends_.tail_index()) {
    SendWr& s = sends_.at(tx_cursor_);
    if (s.mode == 0) {
      s.mode = 1;
      if (s.len >= ctx_.cma_threshold() && cfg.cma != CmaMode::kOff && s.len > 0) {
        const std::uint32_t ok = ph->cma_ok.load(std::memory_order_acquire);
        if (ok == 0) {
          s.mode = 0;  // the peer has not connected yet: hold until it says
          break;
        }
        if (ok == 1) s.mode = 2;
      }
    }
    if (s.mode == 2) {
      constexpr std::uint64_t kFrame = frame_bytes(sizeof(ByRef));
      if (space() < kFrame && (!refresh_tail() || space() < kFrame)) break;
      const FrameHeader fh{0, s.len, sizeof(ByRef), kByRef, s.imm, 0};
      const ByRef ref{reinterpret_cast<std::uintptr_t>(s.buf), ++rndv_issued_};
      write_frame(ring, tx_cap_, tx_salt_, tx_head_, fh, &ref, sizeof ref);
      s.rndv_seq = ref.seq;
      rndv_bytes_ += s.len;
      tx_head_ += kFrame;
      ++tx_cursor_;
      moved = true;
      continue;
    }
    bool blocked = false;
    do {
      const std::uint64_t remaining = s.len - s.written;
      const std::uint64_t want = std::min(remaining, tx_frag_max_);
      const std::uint64_t need = frame_bytes(std::min(want, kMinFragment));
      if (space() < need && (!refresh_tail() || space() < need)) {
        blocked = true;
        break;
      }
      const std::uint64_t fit = (space() & ~std::uint64_t{63}) - sizeof(FrameHeader);
      const std::uint64_t payload = std::min(want, fit);
      const FrameHeader fh{
          0, s.len, static_cast<std::uint32_t>(payload), s.written == 0 ? kFirst : kMore, s.imm, 0};
      write_frame(ring, tx_cap_, tx_salt_, tx_head_, fh, s.buf + s.written, payload);
      s.written += payload;
      tx_head_ += frame_bytes(payload);
      moved = true;
    } while (s.written < s.len);
    if (blocked) break;
    ++tx_cursor_;
  }
  // Complete, in post order, what is written (inline) or acknowledged (by
  // reference). `rndv_done` shares a line with `tail`, which the peer stores
  // for every message it consumes: it is read only when a by-reference send
  // waits for it, not on every pass (a spinning rank that read it on every
  // pass would pull that line away from the peer between its tail stores).
  std::uint64_t acked = 0;
  bool acked_read = false;
  while (!sends_.empty() && sends_.head_index() < tx_cursor_) {
    const SendWr& s = sends_.front();
    if (s.mode == 2 && !acked_read) {
      acked = ph->rndv_done.load(std::memory_order_acquire);
      acked_read = true;
    }
    if (s.mode == 2 && s.rndv_seq > acked) break;
    if (s.mode == 2) rndv_bytes_ -= s.len;
    complete_send(s);
    sends_.pop();
    moved = true;
  }
  return moved;
}

bool Endpoint::progress_recvs() noexcept {
  SegmentHeader* oh = own_seg_.header();
  unsigned char* ring = own_seg_.ring();
  const std::uint64_t cap = oh->ring_capacity;
  const std::uint64_t salt = stamp_salt(nonce_);
  bool moved = false;
  for (;;) {
    // The frame at our tail is complete once its stamp says so (acquire:
    // everything the producer wrote before it is visible).
    const std::uint64_t stamp = stamp_at(ring, cap, rx_tail_).load(std::memory_order_acquire);
    if (stamp != (rx_tail_ ^ salt)) break;
    FrameHeader fh;
    fh.stamp = stamp;
    constexpr std::size_t kSkip = sizeof fh.stamp;
    ring_read(ring, cap, rx_tail_ + kSkip, reinterpret_cast<unsigned char*>(&fh) + kSkip,
              sizeof fh - kSkip);
    const std::uint64_t payload = fh.kind == kByRef ? sizeof(ByRef) : fh.frag_len;
    // A producer never writes a frame larger than a quarter of the ring.
    const bool sane = (fh.kind == kFirst || fh.kind == kMore || fh.kind == kByRef) &&
                      frame_bytes(payload) <= cap / 4 &&
                      fh.frag_len <= fh.msg_len + (fh.kind == kByRef ? sizeof(ByRef) : 0) &&
                      (fh.kind != kByRef || fh.frag_len == sizeof(ByRef));
    const bool expected =
        fh.kind == kMore ? (rx_active_ || rx_discard_ > 0) : (!rx_active_ && rx_discard_ == 0);
    if (!sane || !expected) {
      fail(CHORUS_ERR_SYSTEM, "the ring from " + peer_name() + " holds a malformed frame (kind " +
                                  std::to_string(fh.kind) + ", " + std::to_string(fh.frag_len) +
                                  " of " + std::to_string(fh.msg_len) + " bytes)");
      return true;
    }
    const std::uint64_t data_pos = rx_tail_ + sizeof fh;
    if (fh.kind == kMore) {
      if (rx_discard_ > 0) {
        if (fh.frag_len > rx_discard_) {
          fail(CHORUS_ERR_SYSTEM, "the ring from " + peer_name() + " overran a message");
          return true;
        }
        rx_discard_ -= fh.frag_len;
      } else {
        if (rx_got_ + fh.frag_len > rx_msg_len_) {
          fail(CHORUS_ERR_SYSTEM, "the ring from " + peer_name() + " overran a message");
          return true;
        }
        RecvWr& r = recvs_.front();
        ring_read(ring, cap, data_pos, r.buf + rx_got_, fh.frag_len);
        rx_got_ += fh.frag_len;
        if (rx_got_ == rx_msg_len_) {
          complete_recv(r, rx_msg_len_, rx_imm_);
          recvs_.pop();
          rx_active_ = false;
        }
      }
    } else {
      if (recvs_.empty()) break;  // backpressure: the message waits in the ring
      const RecvWr r = recvs_.front();
      if (fh.msg_len > r.len || (r.fault != 0 && fh.msg_len > 0)) {
        // Dropped, as TCP does: the stream stays consistent for the next
        // message. Both are the caller's errors, not the peer's.
        error(r.wr_id, CHORUS_TP_RECV, CHORUS_ERR_INVALID_ARGUMENT,
              fh.msg_len > r.len
                  ? "message of " + std::to_string(fh.msg_len) +
                        " bytes arrived for a receive of " + std::to_string(r.len) +
                        " bytes from " + peer_name() + "; the message was dropped"
                  : ReceiveBufferCheck::describe(r.buf, r.len, r.fault) + ": the message of " +
                        std::to_string(fh.msg_len) + " bytes from " + peer_name() + " was dropped");
        recvs_.pop();
        if (fh.kind == kByRef) {
          ByRef ref;
          ring_read(ring, cap, data_pos, &ref, sizeof ref);
          oh->rndv_done.store(ref.seq, std::memory_order_release);
        } else {
          rx_discard_ = fh.msg_len - fh.frag_len;
        }
      } else if (fh.kind == kByRef) {
        ByRef ref;
        ring_read(ring, cap, data_pos, &ref, sizeof ref);
        // A sender that closed may reuse its buffer: read only while it is open.
        SegmentHeader* ph = peer_seg_.header();
        if (ph->closed.load(std::memory_order_acquire) != 0) break;  // check_peer fails it
        const int err = cma_read(peer_pid_, r.buf, ref.addr, fh.msg_len);
        if (err == ESRCH || ph->closed.load(std::memory_order_acquire) != 0) {
          fail(CHORUS_ERR_PEER_LOST, peer_name() + " went away while its message of " +
                                         std::to_string(fh.msg_len) + " bytes was being read");
          return true;
        }
        if (err != 0) {
          error(r.wr_id, CHORUS_TP_RECV, CHORUS_ERR_SYSTEM,
                "process_vm_readv of " + std::to_string(fh.msg_len) + " bytes from " + peer_name() +
                    " failed: " + errno_text(err));
        } else {
          complete_recv(r, fh.msg_len, fh.imm);
        }
        recvs_.pop();
        oh->rndv_done.store(ref.seq, std::memory_order_release);
      } else {
        RecvWr& front = recvs_.front();
        ring_read(ring, cap, data_pos, front.buf, fh.frag_len);
        if (fh.frag_len == fh.msg_len) {
          complete_recv(front, fh.msg_len, fh.imm);
          recvs_.pop();
        } else {
          rx_active_ = true;
          rx_msg_len_ = fh.msg_len;
          rx_got_ = fh.frag_len;
          rx_imm_ = fh.imm;
        }
      }
    }
    rx_tail_ += frame_bytes(payload);
    oh->tail.store(rx_tail_, std::memory_order_release);
    moved = true;
  }
  return moved;
}

bool Endpoint::peer_exited() const noexcept {
  if (pidfd_ >= 0) {
    pollfd p{pidfd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)) != 0;
  }
  return ::kill(peer_pid_, 0) != 0 && errno == ESRCH;
}

bool Endpoint::check_peer(Clock::time_point now) noexcept {
  if (failed_) return false;
  SegmentHeader* ph = peer_seg_.header();
  const bool closed = ph->closed.load(std::memory_order_acquire) != 0;
  if (!closed && !(now >= next_peer_check_ && has_work())) return false;  // the usual case
  bool gone = false;
  std::string why;
  if (closed) {
    gone = true;
    why = peer_name() + " closed its endpoint";
  } else if (has_work() && now >= next_peer_check_) {
    next_peer_check_ = now + std::chrono::milliseconds(ctx_.config().peer_check_ms);
    if (peer_exited()) {
      gone = true;
      why = peer_name() + " exited";
    }
  }
  if (!gone) return false;
  // What it sent before going is still in our ring: deliver it first.
  progress_recvs();
  if (!failed_) fail(CHORUS_ERR_PEER_LOST, why);
  return true;
}

void Endpoint::fail(int status, const std::string& why) noexcept {
  if (failed_) return;
  failed_ = true;
  try {
    fail_text_ = why;
    // A peer that closes while nothing is outstanding is an ordinary shutdown.
    if (has_work()) {
      log(CHORUS_LOG_WARN, why + "; failing the endpoint's outstanding work");
    } else {
      log(CHORUS_LOG_DEBUG, why);
    }
  } catch (...) {
  }
  // Inline sends already in the ring are delivered as far as we are
  // concerned; everything else fails, in post order.
  const std::uint64_t acked = peer_seg_.header() != nullptr
                                  ? peer_seg_.header()->rndv_done.load(std::memory_order_acquire)
                                  : 0;
  while (!sends_.empty()) {
    const SendWr& s = sends_.front();
    const bool done = sends_.head_index() < tx_cursor_ && (s.mode != 2 || s.rndv_seq <= acked);
    if (done) {
      complete_send(s);
    } else {
      error(s.wr_id, CHORUS_TP_SEND, status, why);
    }
    sends_.pop();
  }
  while (!recvs_.empty()) {
    error(recvs_.front().wr_id, CHORUS_TP_RECV, status, why);
    recvs_.pop();
  }
  rx_active_ = false;
  rx_discard_ = 0;
}

void Endpoint::complete_send(const SendWr& s) noexcept {
  ctx_.cq().push({s.wr_id, CHORUS_TP_SEND, 0, s.len, handle()});
}

void Endpoint::complete_recv(const RecvWr& r, std::uint64_t byte_len, std::uint32_t imm) noexcept {
  ctx_.cq().push({r.wr_id, CHORUS_TP_RECV, imm, byte_len, handle()});
}

void Endpoint::error(std::uint64_t wr_id, std::uint32_t opcode, int status,
                     const std::string& text) noexcept {
  chorus_tp_error_t e{};
  e.wr_id = wr_id;
  e.opcode = opcode;
  e.status = status;
  e.peer_rank = peer_;
  e.endpoint = handle();
  std::snprintf(e.message, sizeof e.message, "%s", text.c_str());
  ctx_.cq().push_error(e);
}

}  // namespace chorus::shm
