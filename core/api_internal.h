// What the files of the C host API share, and no one else: the structs
// behind the opaque handles, the sets of handles still live, the per-thread
// last-error text, and the wrappers that turn a Status or an escaping
// exception into a return code.
//   api.cc        options, configuration, communicator lifetime, split,
//                 counters, names
//   api_calls.cc  the collectives and point-to-point calls, blocking and
//                 non-blocking, and the request calls
//   api_group.cc  chorus_group_start / chorus_group_end: grouped calls and
//                 all_reduce fusion
#pragma once

#include <chorus/chorus.h>

#include "core/communicator.h"

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>

#define CHORUS_API extern "C" __attribute__((visibility("default")))

struct chorus_comm {
  std::unique_ptr<chorus::core::Communicator> impl;
};

struct chorus_request {
  std::shared_ptr<chorus::core::Request> impl;
  /// Only used while impl is not done. NULL for a grouped call: its
  /// stand-in request names the communicator that runs it (Request::leader).
  chorus::core::Communicator* comm;
  /// The communicator's wait.request_ns, alive even after it is finalized.
  std::shared_ptr<std::atomic<uint64_t>> wait_ns;
};

namespace chorus::core::api {

/// The text chorus_last_error returns on this thread.
std::string& last_error();

/// Handles the API gave out and has not yet taken back: communicators from
/// chorus_comm_init / chorus_comm_split until chorus_comm_finalize, requests
/// from the i-calls until chorus_request_free. Every call checks its handle
/// here first, so finalizing or freeing twice, or using a handle afterwards,
/// is an argument error instead of a use after free. (A handle whose address
/// a later one reuses cannot be told apart.)
template <class T>
class LiveHandles {
 public:
  T* remember(T* h) {
    std::lock_guard lock(mu_);
    set_.insert(h);
    return h;
  }
  /// Takes `h` out of the live set; false if it was not there.
  bool forget(const T* h) {
    std::lock_guard lock(mu_);
    return set_.erase(h) == 1;
  }
  bool live(const T* h) {
    std::lock_guard lock(mu_);
    return set_.count(h) == 1;
  }

 private:
  std::mutex mu_;
  std::unordered_set<const T*> set_;
};
LiveHandles<chorus_comm>& live_comms();
LiveHandles<chorus_request>& live_requests();
inline chorus_comm* remember(chorus_comm* c) { return live_comms().remember(c); }
inline bool forget(const chorus_comm* c) { return live_comms().forget(c); }
inline bool live(const chorus_comm* c) { return c && live_comms().live(c); }
inline bool live(const chorus_request* r) { return r && live_requests().live(r); }

constexpr const char* kNotLiveComm =
    ": not a live communicator (already finalized, or not a handle from chorus_comm_init / "
    "chorus_comm_split)";
constexpr const char* kNotLiveRequest =
    ": not a live request (already freed with chorus_request_free, or not a request from a "
    "chorus_i* call)";

/// The status of `st`, its message kept as the last error when it failed.
int set_error(const Status& st);
/// INVALID_ARGUMENT with `message` as the last error.
int invalid(const std::string& message);
/// The argument error for a NULL or dead communicator handle; OK when live.
/// `caller` is a C string: the text is built only for an error, so a live
/// handle costs no allocation.
int check_comm(const chorus_comm* comm, const char* caller);

/// The arguments of a chorus_iall_reduce that a group may fuse.
struct FusableAllReduce {
  const void* in = nullptr;
  void* out = nullptr;
  size_t count = 0;
  int dtype = -1;
  int op = -1;
};
/// True while this thread is inside chorus_group_start/end (api_group.cc).
bool group_open();
/// Queues a non-blocking call, already checked, in this thread's open
/// group; returns the stand-in request its handle holds until the group
/// ends. `ar`: the call is an all_reduce that may fuse.
std::shared_ptr<Request> group_add(chorus_comm* comm, const char* what,
                                   std::function<Status(Communicator&)> body, bool p2p,
                                   const FusableAllReduce* ar);

/// Runs `body` and converts any escaping exception to a status.
template <class F>
int guarded(F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    last_error() = "out of memory";
    return CHORUS_ERR_SYSTEM;
  } catch (const std::exception& e) {
    last_error() = std::string("internal error: ") + e.what();
    return CHORUS_ERR_INTERNAL;
  } catch (...) {
    last_error() = "internal error: unknown exception";
    return CHORUS_ERR_INTERNAL;
  }
}

}  // namespace chorus::core::api

/// The body of a blocking call on `comm`: the handle check, then `expr`.
#define CHORUS_COMM_CALL(name, expr)                                                    \
  return chorus::core::api::guarded([&] {                                               \
    if (int rc = chorus::core::api::check_comm(comm, name); rc != CHORUS_OK) return rc; \
    return chorus::core::api::set_error(expr);                                          \
  })
