/**
 * @file chorus/chorus.hpp
 * @brief Header-only C++ layer over chorus.h: RAII communicator, typed
 *        overloads, and chorus::Error exceptions carrying the status code.
 */
#ifndef CHORUS_CHORUS_HPP_
#define CHORUS_CHORUS_HPP_

#include <chorus/chorus.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace chorus {

/// Thrown for every failed call; `status()` is the chorus_status_t.
class Error : public std::runtime_error {
 public:
  Error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const noexcept { return status_; }

 private:
  int status_;
};

/// Throws chorus::Error when `status` is not CHORUS_OK.
inline void check(int status) {
  if (status != CHORUS_OK)
    throw Error(status, std::string(chorus_status_name(status)) + ": " + chorus_last_error());
}

/// The chorus_dtype_t of a C++ element type.
template <class T>
constexpr int dtype_of();
template <> constexpr int dtype_of<bool>() { return CHORUS_BOOL; }
template <> constexpr int dtype_of<int8_t>() { return CHORUS_INT8; }
template <> constexpr int dtype_of<int16_t>() { return CHORUS_INT16; }
template <> constexpr int dtype_of<int32_t>() { return CHORUS_INT32; }
template <> constexpr int dtype_of<int64_t>() { return CHORUS_INT64; }
template <> constexpr int dtype_of<uint8_t>() { return CHORUS_UINT8; }
template <> constexpr int dtype_of<uint16_t>() { return CHORUS_UINT16; }
template <> constexpr int dtype_of<uint32_t>() { return CHORUS_UINT32; }
template <> constexpr int dtype_of<uint64_t>() { return CHORUS_UINT64; }
template <> constexpr int dtype_of<float>() { return CHORUS_FLOAT32; }
template <> constexpr int dtype_of<double>() { return CHORUS_FLOAT64; }

/// Owns a chorus_request_t; move-only. Destroying a pending request does not
/// cancel it (see chorus_request_free): wait() first unless the communicator
/// is being torn down.
class Request {
 public:
  Request() = default;
  explicit Request(chorus_request_t* req) : req_(req) {}
  ~Request() { chorus_request_free(req_); }
  Request(Request&& o) noexcept : req_(std::exchange(o.req_, nullptr)) {}
  Request& operator=(Request&& o) noexcept {
    if (this != &o) {
      chorus_request_free(req_);
      req_ = std::exchange(o.req_, nullptr);
    }
    return *this;
  }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  /// True once complete; throws chorus::Error if it completed with an error.
  bool test() {
    int done = 0;
    check(chorus_test(req_, &done));
    return done != 0;
  }
  /// Blocks until complete; throws chorus::Error if it failed.
  void wait() { check(chorus_wait(req_, -1)); }
  /// False if still pending after `timeout_ms`; throws if it failed.
  bool wait_for(int timeout_ms) {
    int rc = chorus_wait(req_, timeout_ms);
    if (rc == CHORUS_ERR_AGAIN) return false;
    check(rc);
    return true;
  }
  /// True if cancelled; false if it had already started or finished.
  bool cancel() { return chorus_cancel(req_) == CHORUS_OK; }
  chorus_request_t* handle() const { return req_; }

 private:
  chorus_request_t* req_ = nullptr;
};

/// Owns a chorus_comm_t; move-only. Calls may come from several threads and
/// run in issue order (see chorus.h).
class Communicator {
 public:
  /// Everything from the config file / environment (chorusrun, CHORUS_*).
  Communicator() : Communicator(nullptr) {}
  explicit Communicator(const chorus_options_t* opts) { check(chorus_comm_init(opts, &comm_)); }
  /// Pins rank/size/coordinator and adds "key=value" settings.
  Communicator(int rank, int size, const std::string& coordinator,
               const std::vector<std::string>& settings = {}) {
    chorus_options_t o;
    chorus_options_init(&o);
    o.rank = rank;
    o.size = size;
    o.coordinator = coordinator.empty() ? nullptr : coordinator.c_str();
    std::vector<const char*> s;
    for (const auto& x : settings) s.push_back(x.c_str());
    o.settings = s.data();
    o.settings_count = s.size();
    check(chorus_comm_init(&o, &comm_));
  }
  ~Communicator() { chorus_comm_finalize(comm_); }
  Communicator(Communicator&& o) noexcept : comm_(o.comm_) { o.comm_ = nullptr; }
  Communicator& operator=(Communicator&& o) noexcept {
    if (this != &o) {
      chorus_comm_finalize(comm_);
      comm_ = o.comm_;
      o.comm_ = nullptr;
    }
    return *this;
  }
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const {
    int r = 0;
    check(chorus_comm_rank(comm_, &r));
    return r;
  }
  int size() const {
    int s = 0;
    check(chorus_comm_size(comm_, &s));
    return s;
  }
  chorus_comm_t* handle() const { return comm_; }

  void all_reduce(const void* in, void* out, size_t count, int dtype, int op) {
    check(chorus_all_reduce(comm_, in, out, count, dtype, op));
  }
  template <class T>
  void all_reduce(const T* in, T* out, size_t count, int op = CHORUS_SUM) {
    all_reduce(in, out, count, dtype_of<T>(), op);
  }
  void all_gather(const void* in, void* out, size_t count, int dtype) {
    check(chorus_all_gather(comm_, in, out, count, dtype));
  }
  void reduce_scatter(const void* in, void* out, size_t count, int dtype, int op) {
    check(chorus_reduce_scatter(comm_, in, out, count, dtype, op));
  }
  void broadcast(void* buf, size_t count, int dtype, int root) {
    check(chorus_broadcast(comm_, buf, count, dtype, root));
  }
  void reduce(const void* in, void* out, size_t count, int dtype, int op, int root) {
    check(chorus_reduce(comm_, in, out, count, dtype, op, root));
  }
  template <class T>
  void reduce(const T* in, T* out, size_t count, int root, int op = CHORUS_SUM) {
    reduce(in, out, count, dtype_of<T>(), op, root);
  }
  void gather(const void* in, void* out, size_t count, int dtype, int root) {
    check(chorus_gather(comm_, in, out, count, dtype, root));
  }
  template <class T>
  void gather(const T* in, T* out, size_t count, int root) {
    gather(in, out, count, dtype_of<T>(), root);
  }
  void scatter(const void* in, void* out, size_t count, int dtype, int root) {
    check(chorus_scatter(comm_, in, out, count, dtype, root));
  }
  template <class T>
  void scatter(const T* in, T* out, size_t count, int root) {
    scatter(in, out, count, dtype_of<T>(), root);
  }
  void all_to_all(const void* in, void* out, size_t count, int dtype) {
    check(chorus_all_to_all(comm_, in, out, count, dtype));
  }
  template <class T>
  void all_to_all(const T* in, T* out, size_t count) {
    all_to_all(in, out, count, dtype_of<T>());
  }
  void all_to_allv(const void* in, const size_t* send_counts, const size_t* send_offsets, void* out,
                   const size_t* recv_counts, const size_t* recv_offsets, int dtype) {
    check(chorus_all_to_allv(comm_, in, send_counts, send_offsets, out, recv_counts, recv_offsets,
                             dtype));
  }
  template <class T>
  void all_to_allv(const T* in, const size_t* send_counts, const size_t* send_offsets, T* out,
                   const size_t* recv_counts, const size_t* recv_offsets) {
    all_to_allv(in, send_counts, send_offsets, out, recv_counts, recv_offsets, dtype_of<T>());
  }
  void barrier() { check(chorus_barrier(comm_)); }
  void send(const void* buf, size_t count, int dtype, int peer) {
    check(chorus_send(comm_, buf, count, dtype, peer));
  }
  void recv(void* buf, size_t count, int dtype, int peer) {
    check(chorus_recv(comm_, buf, count, dtype, peer));
  }
  void abort() { chorus_comm_abort(comm_); }

  Request iall_reduce(const void* in, void* out, size_t count, int dtype, int op) {
    chorus_request_t* r = nullptr;
    check(chorus_iall_reduce(comm_, in, out, count, dtype, op, &r));
    return Request(r);
  }
  template <class T>
  Request iall_reduce(const T* in, T* out, size_t count, int op = CHORUS_SUM) {
    return iall_reduce(in, out, count, dtype_of<T>(), op);
  }
  Request iall_gather(const void* in, void* out, size_t count, int dtype) {
    chorus_request_t* r = nullptr;
    check(chorus_iall_gather(comm_, in, out, count, dtype, &r));
    return Request(r);
  }
  Request ireduce_scatter(const void* in, void* out, size_t count, int dtype, int op) {
    chorus_request_t* r = nullptr;
    check(chorus_ireduce_scatter(comm_, in, out, count, dtype, op, &r));
    return Request(r);
  }
  Request ibroadcast(void* buf, size_t count, int dtype, int root) {
    chorus_request_t* r = nullptr;
    check(chorus_ibroadcast(comm_, buf, count, dtype, root, &r));
    return Request(r);
  }
  Request ireduce(const void* in, void* out, size_t count, int dtype, int op, int root) {
    chorus_request_t* r = nullptr;
    check(chorus_ireduce(comm_, in, out, count, dtype, op, root, &r));
    return Request(r);
  }
  template <class T>
  Request ireduce(const T* in, T* out, size_t count, int root, int op = CHORUS_SUM) {
    return ireduce(in, out, count, dtype_of<T>(), op, root);
  }
  Request igather(const void* in, void* out, size_t count, int dtype, int root) {
    chorus_request_t* r = nullptr;
    check(chorus_igather(comm_, in, out, count, dtype, root, &r));
    return Request(r);
  }
  Request iscatter(const void* in, void* out, size_t count, int dtype, int root) {
    chorus_request_t* r = nullptr;
    check(chorus_iscatter(comm_, in, out, count, dtype, root, &r));
    return Request(r);
  }
  Request iall_to_all(const void* in, void* out, size_t count, int dtype) {
    chorus_request_t* r = nullptr;
    check(chorus_iall_to_all(comm_, in, out, count, dtype, &r));
    return Request(r);
  }
  /// The count and offset arrays are copied; the data buffers must wait.
  Request iall_to_allv(const void* in, const size_t* send_counts, const size_t* send_offsets,
                       void* out, const size_t* recv_counts, const size_t* recv_offsets,
                       int dtype) {
    chorus_request_t* r = nullptr;
    check(chorus_iall_to_allv(comm_, in, send_counts, send_offsets, out, recv_counts, recv_offsets,
                              dtype, &r));
    return Request(r);
  }
  Request ibarrier() {
    chorus_request_t* r = nullptr;
    check(chorus_ibarrier(comm_, &r));
    return Request(r);
  }
  Request isend(const void* buf, size_t count, int dtype, int peer) {
    chorus_request_t* r = nullptr;
    check(chorus_isend(comm_, buf, count, dtype, peer, &r));
    return Request(r);
  }
  Request irecv(void* buf, size_t count, int dtype, int peer) {
    chorus_request_t* r = nullptr;
    check(chorus_irecv(comm_, buf, count, dtype, peer, &r));
    return Request(r);
  }

  /// Collective: the child for `color`, or an empty Communicator (handle() ==
  /// nullptr) for a negative color.
  Communicator split(int color, int key) {
    chorus_comm_t* child = nullptr;
    check(chorus_comm_split(comm_, color, key, &child));
    return Communicator(Adopt{}, child);
  }
  const char* id() const { return chorus_comm_id(comm_); }
  /// Snapshot of the counters as (name, value), in the library's order.
  std::vector<std::pair<std::string, uint64_t>> counters() const {
    size_t n = 0;
    check(chorus_comm_counters(comm_, nullptr, 0, &n));
    std::vector<chorus_counter_t> raw(n + 8);  // room for counters added meanwhile
    check(chorus_comm_counters(comm_, raw.data(), raw.size(), &n));
    std::vector<std::pair<std::string, uint64_t>> out;
    for (size_t i = 0; i < n && i < raw.size(); ++i) out.emplace_back(raw[i].name, raw[i].value);
    return out;
  }

 private:
  struct Adopt {};
  Communicator(Adopt, chorus_comm_t* comm) : comm_(comm) {}
  chorus_comm_t* comm_ = nullptr;
};

}  // namespace chorus

#endif  // CHORUS_CHORUS_HPP_
