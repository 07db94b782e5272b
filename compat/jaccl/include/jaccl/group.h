/**
 * @file jaccl/group.h
 * @brief JACCL's communication group and dtype ids, implemented by Chorus.
 *
 * Source compatible with MLX's JACCL (`mlx/distributed/jaccl/lib`): a program
 * written against JACCL's `Group` builds against this header unchanged and
 * runs over whatever transport Chorus is configured with.
 */
#ifndef JACCL_GROUP_H_
#define JACCL_GROUP_H_

#include <cstddef>

/** Marks the symbols libchorus-jaccl exports; everything else in it is hidden. */
#if defined(__GNUC__) || defined(__clang__)
#define JACCL_EXPORT __attribute__((visibility("default")))
#else
#define JACCL_EXPORT
#endif

namespace jaccl {

/**
 * A communication group: `size()` processes that run collectives together.
 *
 * Every call blocks until this rank's part is done and reports failure by
 * throwing `std::runtime_error` (the message carries Chorus's status name and
 * error text). Collectives must be called by every rank of the group in the
 * same order. A group is used by one thread at a time.
 *
 * `n_bytes` always counts bytes, never elements; for the typed calls it must
 * be a multiple of the dtype's element size. `dtype` is a `jaccl::Dtype`.
 * The library never allocates the caller's buffers: outputs must already
 * hold the number of bytes stated for each call.
 */
class JACCL_EXPORT Group {
 public:
  virtual ~Group() = default;

  /** This process's rank, 0 <= rank < size. */
  virtual int rank() = 0;
  /** Number of processes in the group. */
  virtual int size() = 0;

  /**
   * Element-wise sum over all ranks. `input` and `output` hold `n_bytes`
   * each and may be the same buffer. For bool, sum is logical or.
   */
  virtual void all_sum(const void* input, void* output, size_t n_bytes, int dtype) = 0;

  /** Element-wise maximum over all ranks; as all_sum. Not defined for Complex64. */
  virtual void all_max(const void* input, void* output, size_t n_bytes, int dtype) = 0;

  /** Element-wise minimum over all ranks; as all_sum. Not defined for Complex64. */
  virtual void all_min(const void* input, void* output, size_t n_bytes, int dtype) = 0;

  /**
   * Concatenation of every rank's `n_bytes` of `input`, in rank order.
   * `output` holds `size() * n_bytes` bytes.
   */
  virtual void all_gather(const void* input, void* output, size_t n_bytes) = 0;

  /**
   * Reduce-scatter with sum. `input` holds `size()` contiguous chunks of
   * `n_bytes` each; afterwards `output` (`n_bytes`) on rank r holds the
   * element-wise sum over all ranks of chunk r.
   */
  virtual void sum_scatter(const void* input, void* output, size_t n_bytes, int dtype) = 0;

  /**
   * Send `n_bytes` to rank `dst`. Matched, in order, by a recv of the same
   * size on `dst`. May block until `dst` receives.
   */
  virtual void send(const void* input, size_t n_bytes, int dst) = 0;

  /** Receive exactly `n_bytes` from rank `src` into `output`. */
  virtual void recv(void* output, size_t n_bytes, int src) = 0;

  /** Returns once every rank of the group has entered the barrier. */
  virtual void barrier() = 0;
};

/**
 * Element type ids passed as `dtype`, in JACCL's order. The values equal
 * Chorus's `chorus_dtype_t`, so they convert one to one.
 */
enum Dtype {
  Bool = 0,
  Int8,
  Int16,
  Int32,
  Int64,
  UInt8,
  UInt16,
  UInt32,
  UInt64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Complex64,
};

}  // namespace jaccl

#endif  // JACCL_GROUP_H_
