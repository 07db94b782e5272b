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

/// Owns a chorus_comm_t; move-only. Not thread-safe except abort().
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
  void barrier() { check(chorus_barrier(comm_)); }
  void send(const void* buf, size_t count, int dtype, int peer) {
    check(chorus_send(comm_, buf, count, dtype, peer));
  }
  void recv(void* buf, size_t count, int dtype, int peer) {
    check(chorus_recv(comm_, buf, count, dtype, peer));
  }
  void abort() { chorus_comm_abort(comm_); }

 private:
  chorus_comm_t* comm_ = nullptr;
};

}  // namespace chorus

#endif  // CHORUS_CHORUS_HPP_
