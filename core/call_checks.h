// CallChecks: the argument checks of every collective and point-to-point
// call (core/communicator_checks.cc). They run at issue time, on the
// caller's thread, so that a non-blocking call with bad arguments fails at
// once and queues nothing; they need only the communicator's rank and size.
#pragma once

#include "core/status.h"

#include <cstddef>

namespace chorus::core {

class CallChecks {
 public:
  Status check_all_reduce(const void* in, const void* out, size_t count, int dtype, int op) const;
  Status check_all_gather(const void* in, const void* out, size_t count, int dtype) const;
  Status check_reduce_scatter(const void* in, const void* out, size_t count, int dtype,
                              int op) const;
  Status check_broadcast(const void* buf, size_t count, int dtype, int root) const;
  Status check_p2p(const char* what, const void* buf, size_t count, int dtype, int peer) const;
  Status check_reduce(const void* in, const void* out, size_t count, int dtype, int op,
                      int root) const;
  Status check_gather(const void* in, const void* out, size_t count, int dtype, int root) const;
  Status check_scatter(const void* in, const void* out, size_t count, int dtype, int root) const;
  Status check_rooted_blocks(const char* what, const void* block_buf, const char* block_name,
                             const void* root_buf, const char* root_name, size_t count, int dtype,
                             int root) const;
  Status check_all_to_all(const void* in, const void* out, size_t count, int dtype) const;
  /// The arrays must hold size() entries each (checked for NULL only).
  Status check_all_to_allv(const void* in, const size_t* send_counts, const size_t* send_offsets,
                           const void* out, const size_t* recv_counts, const size_t* recv_offsets,
                           int dtype) const;

 protected:
  /// The shape the checks use; set once the communicator knows it.
  void set_check_shape(int rank, int size) {
    check_rank_ = rank;
    check_size_ = size;
  }

 private:
  int check_rank_ = 0;
  int check_size_ = 1;
};

}  // namespace chorus::core
