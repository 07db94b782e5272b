// The composite's wait machinery: wait, interrupt and wait_fd, and the two
// ways they sleep on both sub-contexts at once: FdWait (one epoll set over
// both wait objects and an eventfd, on the caller's thread) and DualWait (the
// second sub-context's wait on a helper thread, for a sub-transport without
// a wait object). auto_internal.h declares both classes and says why each
// is safe.
#include "core/auto_internal.h"

#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace chorus::core {
namespace {

std::atomic<int> g_helper_threads{0};  // DualWait threads started, ever

}  // namespace

int auto_transport_helper_threads() { return g_helper_threads.load(std::memory_order_relaxed); }

namespace auto_detail {

DualWait::~DualWait() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int DualWait::wait(Sub& first, Sub& second, int timeout_ms) {
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
    broken_message_ = "wait: sub-transport '" + second.name + "' did not return from wait within " +
                      std::to_string(limit.count()) + " ms of its " + std::to_string(timeout_ms) +
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

void DualWait::run() {
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
    std::string message = rc == CHORUS_OK || rc == CHORUS_ERR_TIMEOUT ? "" : sub->tp->last_error();
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

FdWait::~FdWait() {
  if (epoll_ >= 0) ::close(epoll_);
  if (wake_ >= 0) ::close(wake_);
}

bool FdWait::open(const int (&fds)[2]) {
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

bool FdWait::sleep(int timeout_ms) {
  epoll_event ev[3];
  const int n = ::epoll_wait(epoll_, ev, 3, timeout_ms);
  return n != 0;  // EINTR counts as a (spurious) wake-up
}

bool FdWait::system_error(const char* what) {
  fail(CHORUS_ERR_SYSTEM, std::string(what) + ": " + std::strerror(errno));
  if (epoll_ >= 0) ::close(epoll_);
  if (wake_ >= 0) ::close(wake_);
  epoll_ = wake_ = -1;
  return false;
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

}  // namespace auto_detail
}  // namespace chorus::core
