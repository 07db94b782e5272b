#include "shm_context.h"

#include <chorus/transport_names.hpp>
#include "shm.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <string>

namespace chorus::shm {

namespace {

/// Cores this process may run on (its affinity mask), at least 1.
int usable_cores() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

/// Tells the core we are in a spin loop (cheaper for a sibling hyperthread,
/// no system call).
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

Context::Context(const chorus_tp_context_info_t& info)
    : ConfiguredContext(info),
      cores_(usable_cores()),
      // The communicator's size bounds the ranks on this host (they are all
      // here when shm carries every pair; fewer under the auto transport).
      // A rank pinned to one CPU (mpirun --bind-to core, taskset) is not
      // oversubscribed by that count alone: it yields only when a peer says
      // it is on the same CPU (wait()).
      oversubscribed_(cores_ > 1 && info.size > cores_),
      cma_threshold_(config().cma_threshold_set || !oversubscribed_
                         ? config().cma_threshold
                         : std::max(config().cma_threshold, Config::kOversubscribedCmaThreshold)),
      spreader_(cfg_.spread && cores_ > 1 && !oversubscribed_),
      arena_(info.rank) {
  if (cma_threshold_ != config().cma_threshold)
    log(CHORUS_LOG_DEBUG, "cma_threshold " + std::to_string(cma_threshold_) + " bytes: " +
                              std::to_string(info.size) + " ranks on " + std::to_string(cores_) +
                              " cores (set transport.shm.cma_threshold to choose another)");
  if (const int removed = sweep_stale_segments(); removed > 0) {
    log(CHORUS_LOG_INFO,
        "removed " + std::to_string(removed) + " segment(s) left in /dev/shm by exited processes");
  }
  watches_.reserve(kMaxFutexWatches);
  sleepers_.reserve(kMaxFutexWatches);
}

Context::~Context() = default;

void Context::note_cma_refused(const std::string& peer, const std::string& reason) {
  const std::string what = "process_vm_readv from " + peer + " refused (" + reason + ")";
  if (cma_refusal_logged_) {
    log(CHORUS_LOG_DEBUG, what + "; large messages go through the ring");
    return;
  }
  cma_refusal_logged_ = true;
  log(CHORUS_LOG_WARN,
      what +
          ": large messages to such peers are copied twice, through the ring, instead of "
          "once. Single copy needs ptrace access to the peer: the same user and "
          "kernel.yama.ptrace_scope = 0, or CAP_SYS_PTRACE (containers: --cap-add "
          "SYS_PTRACE, and a seccomp profile that allows process_vm_readv). Set "
          "transport.shm.cma = off to silence this, or = on to make it an error. "
          "(Logged once per context.)");
}

chorus_tp_caps_t Context::caps() const {
  chorus_tp_caps_t c{};
  c.struct_size = sizeof c;
  c.max_message_size = std::uint64_t{1} << 40;
  c.max_outstanding_sends = Endpoint::kMaxOutstanding;
  c.max_outstanding_recvs = Endpoint::kMaxOutstanding;
  // No registration: the transport copies from and to any host memory.
  // Every frame header carries an immediate (shm_endpoint.cc). A large
  // message is one descriptor and one process_vm_readv, or ring fragments
  // the two sides copy concurrently: either way it pipelines itself, so one
  // large post is cheapest. Declared whatever `cma` says, so that every rank
  // of a job declares it alike (the algorithms cut transfers by it).
  // Polled connects complete at once (the peer's segment exists from its
  // endpoint_open on); the request bell tells the peer (shm_arena.h).
  c.flags = CHORUS_TP_CAP_IMM_DATA | CHORUS_TP_CAP_LARGE_POSTS | CHORUS_TP_CAP_CONNECT_POLL;
  c.max_address_size = sizeof(Blob);
  return c;
}

Endpoint* Context::open_endpoint(int peer, int channel, void* address_out,
                                 std::size_t* address_len) {
  check_endpoint_open(peer, channel, address_out, address_len);
  if (*address_len < sizeof(Blob)) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "address buffer of " + std::to_string(*address_len) +
                                                 " bytes is too small; the shm transport needs " +
                                                 std::to_string(sizeof(Blob)));
  }
  for (const auto& e : endpoints_) {
    if (e->peer() == peer && e->channel() == channel) throw already_open(peer, channel);
  }
  auto ep = std::make_unique<Endpoint>(*this, peer, channel);
  const Blob b = ep->blob();
  std::memcpy(address_out, &b, sizeof b);
  *address_len = sizeof b;
  endpoints_.push_back(std::move(ep));
  return endpoints_.back().get();
}

void Context::close_endpoint(Endpoint* ep) {
  cq_.forget(ep->handle());
  std::erase_if(endpoints_, [ep](const auto& e) { return e.get() == ep; });
}

void Context::reap(chorus_tp_endpoint_t* ep, std::uint32_t opcode) noexcept {
  Endpoint::from(ep)->reaped(opcode);
}

bool Context::progress_all(bool timed) noexcept {
  // The clock is read for the peer-exit check only (a system call's worth
  // on some virtual machines): on every timed pass (after a sleep) and on
  // every 64th of the others (polls and spin passes).
  Clock::time_point now = Clock::time_point::min();
  if (timed || (++untimed_passes_ & 63) == 0) now = Clock::now();
  bool moved = false;
  for (const auto& e : endpoints_) moved = e->progress(now) || moved;
  take_connect_requests();
  // Closed endpoints' ranges whose peer may since have let go.
  if (now != Clock::time_point::min() && arena_.pending_ranges() > 0) arena_.sweep();
  return moved;
}

void Context::take_connect_requests() noexcept {
  // A peer sets `connect_request` in the segment before it rings the bell
  // (acquire pairs with its increment): a scan after seeing the new value
  // finds every request the bell counted.
  const std::uint32_t bell = arena_.header()->request_bell.load(std::memory_order_acquire);
  if (bell == requests_seen_) return;
  requests_seen_ = bell;
  for (const auto& e : endpoints_)
    if (e->take_connect_request()) cq_.push(e->handle(), CHORUS_TP_OP_CONNECT_REQUEST, 0, 0);
}

int Context::poll(chorus_tp_completion_t* out, std::size_t max) noexcept {
  progress_all();
  return cq_.poll(out, max, [this](chorus_tp_endpoint_t* ep, std::uint32_t op) { reap(ep, op); });
}

int Context::read_error(chorus_tp_error_t* out) noexcept {
  return cq_.read_error(out, [this](chorus_tp_endpoint_t* ep, std::uint32_t op) { reap(ep, op); });
}

int Context::interrupt() noexcept {
  interrupt_pending_.store(true, std::memory_order_seq_cst);
  interrupt_word_.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(&interrupt_word_, true);
  return CHORUS_OK;
}

int Context::spread_from(int cpu) noexcept {
  // Of two co-located ranks the higher one moves (both would otherwise move
  // at once and could land together again); the lower one yields meanwhile.
  const auto cpu1 = static_cast<std::uint32_t>(cpu) + 1;
  bool below = false;
  for (const auto& e : endpoints_) below = below || (e->peer() < rank() && e->peer_on_cpu(cpu1));
  if (!below) return cpu;
  cpu_set_t taken;
  CPU_ZERO(&taken);
  for (const auto& e : endpoints_) {
    const std::uint32_t p = e->peer_cpu1();
    if (p != 0 && p - 1 < CPU_SETSIZE) CPU_SET(p - 1, &taken);
  }
  if (!spreader_.step_aside(cpu, taken)) return cpu;
  const int now = sched_getcpu();
  log(CHORUS_LOG_DEBUG, "moved from CPU " + std::to_string(cpu) + " to CPU " + std::to_string(now) +
                            ", away from a peer rank waiting there");
  return now;
}

namespace {
/// What wait() assumes a peer's process_vm_readv copies per microsecond
/// (4 GB/s, below the 8-10 GB/s measured, so the spin rather outlasts the
/// copy), and the longest it spins for one.
constexpr std::uint64_t kCopyBytesPerUs = 4096;
constexpr std::chrono::microseconds kMaxCopySpin{1000};
}  // namespace

int Context::wait(int timeout_ms) noexcept {
  // The flag is read before it is cleared: a locked exchange on every spin
  // pass costs more than the load that almost always finds it clear.
  auto ready = [this] {
    return !cq_.empty() || (interrupt_pending_.load(std::memory_order_relaxed) &&
                            interrupt_pending_.exchange(false, std::memory_order_seq_cst));
  };
  progress_all();
  if (ready()) return CHORUS_OK;
  if (timeout_ms == 0) return CHORUS_ERR_TIMEOUT;

  // A short spin catches replies that are microseconds away without paying
  // for a futex sleep and wake-up. With a core per rank it stays on the core
  // (a system call per pass costs more than the reply takes to come); on an
  // oversubscribed host it yields between passes, since the peer we wait
  // for may need this very core.
  //
  // A host with a core per rank can still put two ranks on one core: other
  // work loads the other cores, and the futex wake-up pulls the woken rank
  // onto the waker's core. Spinning there only delays the peer by the whole
  // spin (every message cost 2 x spin_us + a wake-up, ~53 us instead of
  // ~1 us, measured). So each rank publishes the CPU it waits on (segment
  // `cpu`, only when it changed) and yields instead of spinning while a
  // peer it waits for says it is on the same CPU: ~5.5 us per 8 B
  // all_reduce when co-located (measured; sleeping on the futex at once
  // instead cost ~12 us, and the wake-ups kept the ranks together).
  bool yield = oversubscribed_;
  std::chrono::microseconds spin(cfg_.spin_us);
  std::uint64_t copying = 0;  // bytes peers are reading from us by reference
  if (cfg_.spin_us > 0) {
    int cpu = sched_getcpu();  // rseq: no system call with glibc >= 2.35
    if (spreader_.enabled() && cpu >= 0) cpu = spread_from(cpu);
    const std::uint32_t cpu1 = cpu >= 0 ? static_cast<std::uint32_t>(cpu) + 1 : 0;
    // A pinned rank yields when any peer shares its CPU (whichever rank we
    // wait for may wait for that one); otherwise only for the peers we wait on.
    for (const auto& e : endpoints_) {
      e->publish_cpu(cpu1);
      if (!yield && (cores_ == 1 || e->watchable()) && e->peer_on_cpu(cpu1)) yield = true;
      copying += e->rndv_bytes_in_flight();
    }
    // A by-reference send completes once the peer has copied it, about
    // bytes / kCopyBytesPerUs from now: spin that long (at most
    // kMaxCopySpin) instead of sleeping, which would put a futex wake-up
    // (30-50 us on the development VM) on the path of every large transfer.
    // Not when yielding: a peer on this CPU needs the CPU, not our spin.
    if (!yield && copying > 0)
      spin = std::max(spin,
                      std::min(kMaxCopySpin, std::chrono::microseconds(copying / kCopyBytesPerUs)));
    // The first passes read no clock: a reply that is a few hundred
    // nanoseconds away is common for small messages, and a clock read (vDSO)
    // costs about as much as a pass. 16 passes take well under the 1 ms
    // that is the smallest timeout.
    if (!yield) {
      for (int pass = 0; pass < 16; ++pass) {
        cpu_relax();
        progress_all();
        if (ready()) return CHORUS_OK;
      }
    }
  }

  const auto start = Clock::now();
  const auto deadline =
      timeout_ms < 0 ? Clock::time_point::max() : start + std::chrono::milliseconds(timeout_ms);
  if (cfg_.spin_us > 0) {
    const auto spin_end = std::min(deadline, start + spin);
    for (unsigned pass = 0;; ++pass) {
      if ((yield || (pass & 15) == 0) && Clock::now() >= spin_end) break;
      if (yield) {
        sched_yield();
      } else {
        cpu_relax();
      }
      progress_all();
      if (ready()) return CHORUS_OK;
    }
  }

  for (;;) {
    // Announce that we may sleep, then look once more: a peer that wrote
    // before our flag was visible is seen by this check, one that writes
    // after it sees the flag and wakes us (or changes the bell first, so
    // the futex call returns at once).
    watches_.clear();
    sleepers_.clear();
    watches_.push_back({&interrupt_word_, interrupt_word_.load(std::memory_order_seq_cst), true});
    // Peers' polled connects ring the arena's request bell.
    ArenaHeader* arena = arena_.header();
    arena->sleeping.store(1, std::memory_order_seq_cst);
    watches_.push_back(
        {&arena->request_bell, arena->request_bell.load(std::memory_order_seq_cst), false});
    bool truncated = false;
    for (const auto& e : endpoints_) {
      if (!e->watchable()) continue;
      if (watches_.size() == kMaxFutexWatches) {
        truncated = true;
        break;
      }
      e->set_sleeping(true);
      sleepers_.push_back(e.get());
      watches_.push_back({e->bell(), e->bell()->load(std::memory_order_seq_cst), false});
    }
    progress_all(true);
    bool done = ready();
    if (!done) {
      auto until = deadline;
      // Work outstanding: wake up now and then to notice a peer that died
      // (a closed endpoint rings the bell; a killed process cannot).
      if (!sleepers_.empty())
        until = std::min(until, Clock::now() + std::chrono::milliseconds(cfg_.peer_check_ms));
      if (truncated) until = std::min(until, Clock::now() + std::chrono::milliseconds(1));
      futex_wait_any(watches_, until);
    }
    for (Endpoint* e : sleepers_) e->set_sleeping(false);
    arena->sleeping.store(0, std::memory_order_relaxed);
    if (done) return CHORUS_OK;
    progress_all(true);
    if (ready()) return CHORUS_OK;
    if (Clock::now() >= deadline) return CHORUS_ERR_TIMEOUT;
  }
}

}  // namespace chorus::shm
