// The shared lane driver (core/lane_driver.h): its thread, the fibers the
// lanes' collectives run on, and the switches between them. Fibers are
// ucontext stacks; a switch saves and restores the thread-locals a call
// relies on (the running communicator for the proxied transport ops, the
// log's communicator id) and tells the sanitizers about the new stack.

#include "core/lane_driver.h"

#include <chorus/chorus.h>

#include "core/communicator.h"
#include "core/communicator_internal.h"
#include "core/lane_family.h"
#include "core/log.h"

#include <sched.h>
#include <sys/mman.h>
#include <ucontext.h>

#include <chrono>
#include <cstddef>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define CHORUS_FIBER_TSAN 1
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define CHORUS_FIBER_ASAN 1
#endif

namespace chorus::core {

LaneFamily::LaneFamily() = default;
LaneFamily::~LaneFamily() = default;

namespace {

// A call's stack: algorithm plugins, reduction kernels and error text; the
// sanitizers' instrumentation needs the headroom.
constexpr size_t kStackBytes = size_t(1) << 20;
// After a round in which no fiber moved, the driver yields the CPU (peers on
// an oversubscribed host may need it to answer) for up to this long before
// it sleeps in a transport.
constexpr auto kSpin = std::chrono::microseconds(50);
// A sleep in one lane's transport does not see another lane's completions:
// it is kept short.
constexpr int kSleepMs = 1;

thread_local LaneFiber* t_fiber = nullptr;

}  // namespace

struct LaneFiber {
  Communicator* lane = nullptr;
  ucontext_t ctx{};
  ucontext_t back{};  // the driver's context while the fiber runs
  void* stack = nullptr;
  std::shared_ptr<Request> req;  // the call it runs; null when idle
  bool done = false;             // req finished; the driver clears it
  bool moved = false;            // took completions since it was resumed
  bool aborted = false;          // stop() aborted its lane
  // The thread-locals of the call, kept while the fiber is switched out.
  Communicator* running = nullptr;
  const std::string* log_comm = nullptr;
#ifdef CHORUS_FIBER_TSAN
  void* tsan = nullptr;
  void* tsan_back = nullptr;
#endif
#ifdef CHORUS_FIBER_ASAN
  void* fake_stack = nullptr;
  const void* back_bottom = nullptr;
  size_t back_size = 0;
#endif

  ~LaneFiber() {
#ifdef CHORUS_FIBER_TSAN
    if (tsan) __tsan_destroy_fiber(tsan);
#endif
    if (stack) munmap(stack, kStackBytes);
  }
};

namespace {

// Back to the driver, from the fiber; returns when resumed.
void switch_to_driver(LaneFiber* f) {
  f->running = t_running;
  f->log_comm = log_thread_comm();
#ifdef CHORUS_FIBER_TSAN
  __tsan_switch_to_fiber(f->tsan_back, 0);
#endif
#ifdef CHORUS_FIBER_ASAN
  __sanitizer_start_switch_fiber(&f->fake_stack, f->back_bottom, f->back_size);
#endif
  swapcontext(&f->ctx, &f->back);
#ifdef CHORUS_FIBER_ASAN
  __sanitizer_finish_switch_fiber(f->fake_stack, &f->back_bottom, &f->back_size);
#endif
  t_running = f->running;
  log_set_thread_comm(f->log_comm);
}

// Runs `f` until it yields or finishes its call, on the driver's thread.
void resume(LaneFiber* f) {
  f->moved = false;
  t_fiber = f;
#ifdef CHORUS_FIBER_TSAN
  __tsan_switch_to_fiber(f->tsan, 0);
#endif
#ifdef CHORUS_FIBER_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f->stack, kStackBytes);
#endif
  swapcontext(&f->back, &f->ctx);
#ifdef CHORUS_FIBER_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  t_fiber = nullptr;
  t_running = nullptr;
  log_set_thread_comm(nullptr);
}

}  // namespace

LaneDriver::LaneDriver(std::vector<Communicator*> lanes) : lanes_(std::move(lanes)) {
  for (Communicator* c : lanes_) {
    auto f = std::make_unique<LaneFiber>();
    f->lane = c;
    fibers_.push_back(std::move(f));
  }
  thread_ = std::thread([this] { main(); });
}

LaneDriver::~LaneDriver() { stop(); }

bool LaneDriver::on_fiber() { return t_fiber != nullptr; }

void LaneDriver::yield_idle() {
  if (LaneFiber* f = t_fiber) switch_to_driver(f);
}

void LaneDriver::note_moved() {
  if (LaneFiber* f = t_fiber) f->moved = true;
}

// A fiber's whole life: run the call it is given, report it done, wait for
// the next. It never returns; the driver drops its stack when it stops.
void LaneDriver::fiber_main() {
  LaneFiber* f = t_fiber;
#ifdef CHORUS_FIBER_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &f->back_bottom, &f->back_size);
#endif
  t_running = nullptr;
  log_set_thread_comm(nullptr);
  for (;;) {
    f->lane->run_request(*f->req);
    f->done = true;
    switch_to_driver(f);
  }
}

void LaneDriver::wake() {
  int sleeping;
  {
    std::lock_guard lock(mu_);
    kicked_ = true;
    sleeping = sleeping_in_;
  }
  cv_.notify_one();
  // The lanes outlive the driver's thread, and sleeping_in_ is -1 once it
  // has stopped.
  if (sleeping >= 0) interrupt(*lanes_[size_t(sleeping)]);
}

void LaneDriver::interrupt(Communicator& c) { interrupt_wait(c.tp_, c.ctx_); }

void LaneDriver::wait_in(Communicator& c, int ms) {
  const auto t0 = std::chrono::steady_clock::now();
  c.tp_->wait(c.ctx_, ms);
  add_wait_ns(c.transport_wait_ns_, t0);
}

void LaneDriver::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
}

bool LaneDriver::take(size_t k) {
  LaneFiber& f = *fibers_[k];
  if (f.req) return false;
  Communicator& c = *lanes_[k];
  {
    std::lock_guard lock(c.q_mu_);
    // Collectives only (an order from lane_for_call), in the lane's issue
    // order, and only while nothing else holds the lane's stream.
    if (c.stopping_ || c.busy_ || c.queue_.empty() ||
        c.queue_.front()->order() == Request::kNoOrder)
      return false;
    f.req = std::move(c.queue_.front());
    c.queue_.pop_front();
    c.busy_ = true;
    c.running_ = f.req;
  }
  if (!f.stack) {
    void* mem = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (mem == MAP_FAILED) {
      // No stack for a fiber: the call runs here, to its end, as a lane's
      // own executor would run it (waiting in its transport).
      c.log(CHORUS_LOG_WARN, "no memory for a lane driver fiber's stack; running " + f.req->what() +
                                 " without overlap");
      c.run_request(*f.req);
      finish(k);
      return false;
    }
    // A guard page below the stack: an overflow faults instead of writing
    // over whatever lies there.
    mprotect(mem, 4096, PROT_NONE);
    f.stack = mem;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = mem;
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, &LaneDriver::fiber_main, 0);
#ifdef CHORUS_FIBER_TSAN
    f.tsan = __tsan_create_fiber(0);
    f.tsan_back = __tsan_get_current_fiber();
#endif
  }
  return true;
}

void LaneDriver::finish(size_t k) {
  LaneFiber& f = *fibers_[k];
  Communicator& c = *lanes_[k];
  f.req.reset();
  f.done = false;
  bool worker_work;
  {
    std::lock_guard lock(c.q_mu_);
    c.running_.reset();
    c.busy_ = false;
    // What the lane's worker (lane 0's point-to-point executor) waits for;
    // waking it for nothing costs two context switches per call.
    worker_work = (!c.queue_.empty() && c.queue_.front()->order() == Request::kNoOrder) ||
                  !c.inbox_.empty() || c.p2p_active_.load();
  }
  if (worker_work) c.q_cv_.notify_all();
}

void LaneDriver::main() {
  auto idle_since = std::chrono::steady_clock::now();
  bool idle = false;
  for (;;) {
    bool stopping;
    {
      std::lock_guard lock(mu_);
      stopping = stopping_;
      kicked_ = false;
    }
    bool any = false;
    for (size_t k = 0; k < fibers_.size(); ++k) {
      LaneFiber& f = *fibers_[k];
      if (!stopping) take(k);
      if (!f.req) continue;
      any = true;
      if (stopping && !f.aborted) {
        // Finalized with this call running: it ends as ABORTED, as a lane's
        // executor's call does when its communicator is finalized.
        f.aborted = true;
        // The lane's own finalize warns about what is still queued.
        f.lane->log(CHORUS_LOG_WARN, "finalized with a collective running; aborting it");
        f.lane->finalizing_.store(true);
        f.lane->aborted_.store(true);
      }
    }
    if (!any) {
      if (stopping) break;
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || kicked_; });
      idle = false;
      continue;
    }
    bool moved = false;
    for (size_t k = 0; k < fibers_.size(); ++k) {
      LaneFiber& f = *fibers_[k];
      if (!f.req) continue;
      resume(&f);
      moved = moved || f.moved || f.done;
      if (f.done) finish(k);
    }
    if (moved) {
      idle = false;
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!idle) idle = true, idle_since = now;
    if (now - idle_since < kSpin) {
      sched_yield();
      continue;
    }
    sleep_idle();
  }
  fibers_.clear();
}

// Sleeps in the transport of the oldest call that runs (the one the others
// were issued behind), for at most kSleepMs; wake() interrupts it.
void LaneDriver::sleep_idle() {
  size_t oldest = fibers_.size();
  for (size_t k = 0; k < fibers_.size(); ++k)
    if (fibers_[k]->req &&
        (oldest == fibers_.size() || fibers_[k]->req->order() < fibers_[oldest]->req->order()))
      oldest = k;
  if (oldest == fibers_.size()) return;
  {
    std::lock_guard lock(mu_);
    if (kicked_ || stopping_) return;
    sleeping_in_ = int(oldest);
  }
  wait_in(*lanes_[oldest], kSleepMs);
  std::lock_guard lock(mu_);
  sleeping_in_ = -1;
}

}  // namespace chorus::core
