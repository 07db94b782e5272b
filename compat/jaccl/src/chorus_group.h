// jaccl::Group over a Chorus communicator.
#ifndef JACCL_SRC_CHORUS_GROUP_H_
#define JACCL_SRC_CHORUS_GROUP_H_

#include <jaccl/group.h>

#include <chorus/chorus.h>

#include <memory>
#include <string>

namespace jaccl::detail {

/// Owns one chorus_comm_t and maps each JACCL call onto one Chorus call:
/// byte counts become element counts of the dtype (the untyped calls move
/// uint8), Chorus failures become std::runtime_error. Used by one thread at
/// a time, like the communicator under it.
class ChorusGroup final : public Group {
 public:
  /// Takes ownership of `comm` (non-NULL); it is finalized with the group.
  explicit ChorusGroup(chorus_comm_t* comm);
  /// At `info` log level, one line with the bytes the transport carried.
  ~ChorusGroup() override;

  /// The transport the job runs over and why, for that line.
  void set_transport(std::string transport) { transport_ = std::move(transport); }

  int rank() override { return rank_; }
  int size() override { return size_; }

  void all_sum(const void* input, void* output, size_t n_bytes, int dtype) override;
  void all_max(const void* input, void* output, size_t n_bytes, int dtype) override;
  void all_min(const void* input, void* output, size_t n_bytes, int dtype) override;
  void all_gather(const void* input, void* output, size_t n_bytes) override;
  void sum_scatter(const void* input, void* output, size_t n_bytes, int dtype) override;
  void send(const void* input, size_t n_bytes, int dst) override;
  void recv(void* output, size_t n_bytes, int src) override;
  void barrier() override;

 private:
  struct CommDeleter {
    void operator()(chorus_comm_t* comm) const { chorus_comm_finalize(comm); }
  };

  void all_reduce(const char* what, const void* input, void* output, size_t n_bytes, int dtype,
                  int op);

  std::unique_ptr<chorus_comm_t, CommDeleter> comm_;
  int rank_ = 0;
  int size_ = 1;
  std::string transport_;
};

}  // namespace jaccl::detail

#endif  // JACCL_SRC_CHORUS_GROUP_H_
