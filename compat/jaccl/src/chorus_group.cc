#include "chorus_group.h"

#include "transport_choice.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace jaccl::detail {
namespace {

/// Throws the failure of a Chorus call made for JACCL's `what`. Reads the
/// thread's last error at once: the next Chorus call would replace it.
[[noreturn]] void fail(const char* what, int status) {
  throw std::runtime_error(std::string("[jaccl] ") + what + ": " + chorus_status_name(status) +
                           ": " + chorus_last_error());
}

void check(const char* what, int status) {
  if (status != CHORUS_OK) fail(what, status);
}

/// Elements of `dtype` in `n_bytes`; throws for an unknown dtype or a byte
/// count that does not hold a whole number of elements (JACCL would drop
/// the tail silently).
size_t element_count(const char* what, size_t n_bytes, int dtype) {
  const size_t element = chorus_dtype_size(dtype);
  if (element == 0)
    throw std::runtime_error(std::string("[jaccl] ") + what + ": unknown dtype " +
                             std::to_string(dtype) + " (expected a jaccl::Dtype, 0.." +
                             std::to_string(CHORUS_DTYPE_COUNT - 1) + ")");
  if (n_bytes % element != 0)
    throw std::runtime_error(std::string("[jaccl] ") + what + ": n_bytes " +
                             std::to_string(n_bytes) + " is not a multiple of the " +
                             chorus_dtype_name(dtype) + " element size " + std::to_string(element));
  return n_bytes / element;
}

}  // namespace

ChorusGroup::ChorusGroup(chorus_comm_t* comm) : comm_(comm) {
  check("rank", chorus_comm_rank(comm_.get(), &rank_));
  check("size", chorus_comm_size(comm_.get(), &size_));
}

void ChorusGroup::all_reduce(const char* what, const void* input, void* output, size_t n_bytes,
                             int dtype, int op) {
  const size_t count = element_count(what, n_bytes, dtype);
  check(what, chorus_all_reduce(comm_.get(), input, output, count, dtype, op));
}

void ChorusGroup::all_sum(const void* input, void* output, size_t n_bytes, int dtype) {
  all_reduce("all_sum", input, output, n_bytes, dtype, CHORUS_SUM);
}

void ChorusGroup::all_max(const void* input, void* output, size_t n_bytes, int dtype) {
  all_reduce("all_max", input, output, n_bytes, dtype, CHORUS_MAX);
}

void ChorusGroup::all_min(const void* input, void* output, size_t n_bytes, int dtype) {
  all_reduce("all_min", input, output, n_bytes, dtype, CHORUS_MIN);
}

void ChorusGroup::all_gather(const void* input, void* output, size_t n_bytes) {
  check("all_gather", chorus_all_gather(comm_.get(), input, output, n_bytes, CHORUS_UINT8));
}

void ChorusGroup::sum_scatter(const void* input, void* output, size_t n_bytes, int dtype) {
  const size_t count = element_count("sum_scatter", n_bytes, dtype);
  check("sum_scatter", chorus_reduce_scatter(comm_.get(), input, output, count, dtype, CHORUS_SUM));
}

void ChorusGroup::send(const void* input, size_t n_bytes, int dst) {
  check("send", chorus_send(comm_.get(), input, n_bytes, CHORUS_UINT8, dst));
}

void ChorusGroup::recv(void* output, size_t n_bytes, int src) {
  check("recv", chorus_recv(comm_.get(), output, n_bytes, CHORUS_UINT8, src));
}

void ChorusGroup::barrier() { check("barrier", chorus_barrier(comm_.get())); }

ChorusGroup::~ChorusGroup() {
  // What the transport carried, from Chorus's counters: shows a JACCL user
  // (and the tests) which wires the job really used.
  size_t n = 0;
  if (!comm_ || chorus_comm_counters(comm_.get(), nullptr, 0, &n) != CHORUS_OK) return;
  std::vector<chorus_counter_t> counters(n);
  if (chorus_comm_counters(comm_.get(), counters.data(), n, &n) != CHORUS_OK) return;
  uint64_t sent = 0, received = 0;
  for (size_t i = 0; i < n && i < counters.size(); ++i) {
    const std::string name = counters[i].name;
    if (name == "bytes_sent") sent = counters[i].value;
    if (name == "bytes_received") received = counters[i].value;
  }
  log_info(rank_, "[jaccl] finalize: transport '" + transport_ + "' carried bytes_sent=" +
                      std::to_string(sent) + " bytes_received=" + std::to_string(received));
}

}  // namespace jaccl::detail
