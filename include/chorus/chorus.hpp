/**
 * @file chorus/chorus.hpp
 * @brief Header-only C++ layer over chorus.h: RAII communicator, typed
 *        overloads, and chorus::Error exceptions carrying the status code.
 *
 * Every collective and point-to-point call, blocking and non-blocking, comes
 * in two forms: untyped (`const void*`, count, dtype, ...) as in the C API,
 * and typed (`const T*`, count, ...) for every T with a dtype_traits
 * specialisation, which supplies the dtype. Input buffers are `const`; counts
 * are in elements as in the C API. Needs C++17 or newer.
 */
#ifndef CHORUS_CHORUS_HPP_
#define CHORUS_CHORUS_HPP_

#include <chorus/chorus.h>
#include <chorus/float16.hpp>

#include <chrono>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
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

/**
 * dtype_traits<T>::value is the chorus_dtype_t of element type T; types
 * without a specialisation are not element types (the typed calls do not
 * accept them). To pass a type of your own with the same layout as one of
 * these, specialise dtype_traits for it.
 */
template <class T, class = void>
struct dtype_traits {};
template <int D>
struct dtype_constant {
  static constexpr int value = D;
};
template <>
struct dtype_traits<bool> : dtype_constant<CHORUS_BOOL> {};
template <>
struct dtype_traits<int8_t> : dtype_constant<CHORUS_INT8> {};
template <>
struct dtype_traits<int16_t> : dtype_constant<CHORUS_INT16> {};
template <>
struct dtype_traits<int32_t> : dtype_constant<CHORUS_INT32> {};
template <>
struct dtype_traits<int64_t> : dtype_constant<CHORUS_INT64> {};
template <>
struct dtype_traits<uint8_t> : dtype_constant<CHORUS_UINT8> {};
template <>
struct dtype_traits<uint16_t> : dtype_constant<CHORUS_UINT16> {};
template <>
struct dtype_traits<uint32_t> : dtype_constant<CHORUS_UINT32> {};
template <>
struct dtype_traits<uint64_t> : dtype_constant<CHORUS_UINT64> {};
template <>
struct dtype_traits<half> : dtype_constant<CHORUS_FLOAT16> {};
template <>
struct dtype_traits<bfloat16> : dtype_constant<CHORUS_BFLOAT16> {};
template <>
struct dtype_traits<float> : dtype_constant<CHORUS_FLOAT32> {};
template <>
struct dtype_traits<double> : dtype_constant<CHORUS_FLOAT64> {};
template <>
struct dtype_traits<std::complex<float>> : dtype_constant<CHORUS_COMPLEX64> {};
// `long long` and `long` are distinct types of the same size on LP64, and
// int64_t is only one of them: the other 64-bit integers map by size.
template <class T>
struct dtype_traits<
    T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> && sizeof(T) == 8 &&
                        !std::is_same_v<T, int64_t> && !std::is_same_v<T, uint64_t>>>
    : dtype_constant<std::is_signed_v<T> ? CHORUS_INT64 : CHORUS_UINT64> {};

/// True for a type the typed calls accept (cv-qualifiers ignored).
template <class T, class = void>
inline constexpr bool is_element_v = false;
template <class T>
inline constexpr bool
    is_element_v<T, std::void_t<decltype(dtype_traits<std::remove_cv_t<T>>::value)>> = true;
#if __cplusplus >= 202002L
template <class T>
concept Element = is_element_v<T>;
#endif

/// The chorus_dtype_t of element type T.
template <class T, std::enable_if_t<is_element_v<T>, int> = 0>
inline constexpr int dtype_v = dtype_traits<std::remove_cv_t<T>>::value;

/// The chorus_dtype_t of element type T (dtype_v<T> as a function).
template <class T>
constexpr int dtype_of() {
  return dtype_v<T>;
}

/// Enables a typed overload for element types only (SFINAE, so C++17 works).
/// T is never const: inputs are `const T*`, and a const output or receive
/// buffer deduces a const T and is refused.
template <class T>
using if_element_t = std::enable_if_t<is_element_v<T> && !std::is_const_v<T>, int>;

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
  /// What a completed tagged receive got (chorus_request_p2p_status).
  chorus_p2p_status_t p2p_status() const {
    chorus_p2p_status_t st{};
    check(chorus_request_p2p_status(req_, &st));
    return st;
  }
  /// False if still pending after `timeout_ms`; throws if it failed.
  bool wait_for(int timeout_ms) {
    int rc = chorus_wait(req_, timeout_ms);
    if (rc == CHORUS_ERR_AGAIN) return false;
    check(rc);
    return true;
  }
  /// The same with any std::chrono duration: rounded up to whole
  /// milliseconds (a positive timeout below 1 ms waits 1 ms); anything
  /// beyond what an int of milliseconds holds, and a negative one, waits
  /// forever (as chorus_wait's negative timeout); NaN throws
  /// CHORUS_ERR_INVALID_ARGUMENT.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) {
    using Ms = std::chrono::duration<double, std::milli>;
    const double ms = std::chrono::duration_cast<Ms>(timeout).count();
    int timeout_ms = -1;
    if (ms != ms) {
      throw Error(CHORUS_ERR_INVALID_ARGUMENT, "Request::wait_for: the timeout is NaN");
    } else if (ms < 0) {
      timeout_ms = -1;  // no limit, as chorus_wait's negative timeout
    } else if (ms == 0) {
      timeout_ms = 0;
    } else if (ms < double(std::numeric_limits<int>::max())) {
      timeout_ms = int(std::ceil(ms));
    }
    return wait_for(timeout_ms);
  }
  /// True if cancelled; false if it had already started or finished.
  bool cancel() { return chorus_cancel(req_) == CHORUS_OK; }
  chorus_request_t* handle() const { return req_; }

 private:
  chorus_request_t* req_ = nullptr;
};

/// Opens a group on the calling thread (chorus_group_start): the
/// non-blocking calls that follow are queued until the matching group_end().
inline void group_start() { check(chorus_group_start()); }
/// Closes this thread's innermost group; the outermost one issues its
/// calls, fusing consecutive all_reduces (chorus_group_end). Throws
/// chorus::Error when no group is open.
inline void group_end() { check(chorus_group_end()); }

/// A group for one scope: started by the constructor, ended by end() (which
/// throws on failure) or else by the destructor (which cannot report one).
class Group {
 public:
  Group() { group_start(); }
  ~Group() {
    if (open_) chorus_group_end();
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  void end() {
    open_ = false;
    group_end();
  }

 private:
  bool open_ = true;
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

  // ---- blocking, untyped ----
  void all_reduce(const void* in, void* out, size_t count, int dtype, int op) {
    check(chorus_all_reduce(comm_, in, out, count, dtype, op));
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

  // ---- blocking, typed: the dtype comes from dtype_traits<T> ----
  /// `count` elements in `in` and `out` (may be the same buffer).
  template <class T, if_element_t<T> = 0>
  void all_reduce(const T* in, T* out, size_t count, int op = CHORUS_SUM) {
    all_reduce(in, out, count, dtype_v<T>, op);
  }
  /// `count` elements in, `count` * size() out (rank r's block at r * count).
  template <class T, if_element_t<T> = 0>
  void all_gather(const T* in, T* out, size_t count) {
    all_gather(in, out, count, dtype_v<T>);
  }
  /// `count` * size() elements in, this rank's reduced block of `count` out.
  template <class T, if_element_t<T> = 0>
  void reduce_scatter(const T* in, T* out, size_t count, int op = CHORUS_SUM) {
    reduce_scatter(in, out, count, dtype_v<T>, op);
  }
  template <class T, if_element_t<T> = 0>
  void broadcast(T* buf, size_t count, int root) {
    broadcast(buf, count, dtype_v<T>, root);
  }
  template <class T, if_element_t<T> = 0>
  void send(const T* buf, size_t count, int peer) {
    send(buf, count, dtype_v<T>, peer);
  }
  template <class T, if_element_t<T> = 0>
  void recv(T* buf, size_t count, int peer) {
    recv(buf, count, dtype_v<T>, peer);
  }

  // ---- non-blocking, untyped ----
  Request iall_reduce(const void* in, void* out, size_t count, int dtype, int op) {
    chorus_request_t* r = nullptr;
    check(chorus_iall_reduce(comm_, in, out, count, dtype, op, &r));
    return Request(r);
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
  // ---- tagged point-to-point (chorus_send_tagged and friends) ----
  void send_tagged(const void* buf, size_t count, int dtype, int peer, int tag) {
    check(chorus_send_tagged(comm_, buf, count, dtype, peer, tag));
  }
  chorus_p2p_status_t recv_tagged(void* buf, size_t count, int dtype,
                                  int source = CHORUS_ANY_SOURCE, int tag = CHORUS_ANY_TAG) {
    chorus_p2p_status_t st{};
    check(chorus_recv_tagged(comm_, buf, count, dtype, source, tag, &st));
    return st;
  }
  Request isend_tagged(const void* buf, size_t count, int dtype, int peer, int tag) {
    chorus_request_t* r = nullptr;
    check(chorus_isend_tagged(comm_, buf, count, dtype, peer, tag, &r));
    return Request(r);
  }
  Request irecv_tagged(void* buf, size_t count, int dtype, int source = CHORUS_ANY_SOURCE,
                       int tag = CHORUS_ANY_TAG) {
    chorus_request_t* r = nullptr;
    check(chorus_irecv_tagged(comm_, buf, count, dtype, source, tag, &r));
    return Request(r);
  }

  // ---- non-blocking, typed (buffers as for the blocking forms) ----
  template <class T, if_element_t<T> = 0>
  Request iall_reduce(const T* in, T* out, size_t count, int op = CHORUS_SUM) {
    return iall_reduce(in, out, count, dtype_v<T>, op);
  }
  template <class T, if_element_t<T> = 0>
  Request iall_gather(const T* in, T* out, size_t count) {
    return iall_gather(in, out, count, dtype_v<T>);
  }
  template <class T, if_element_t<T> = 0>
  Request ireduce_scatter(const T* in, T* out, size_t count, int op = CHORUS_SUM) {
    return ireduce_scatter(in, out, count, dtype_v<T>, op);
  }
  template <class T, if_element_t<T> = 0>
  Request ibroadcast(T* buf, size_t count, int root) {
    return ibroadcast(buf, count, dtype_v<T>, root);
  }
  template <class T, if_element_t<T> = 0>
  Request isend(const T* buf, size_t count, int peer) {
    return isend(buf, count, dtype_v<T>, peer);
  }
  template <class T, if_element_t<T> = 0>
  Request irecv(T* buf, size_t count, int peer) {
    return irecv(buf, count, dtype_v<T>, peer);
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
