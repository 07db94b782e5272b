// DeviceMatrix: JACCL's per-peer device matrix (transport.verbs.devices_file).
#pragma once

#include <string>
#include <vector>

namespace chorus::verbs {

/// devices[i][j] lists the device(s) rank i uses toward rank j, as in JACCL's
/// MLX_IBV_DEVICES file: a square JSON array of arrays whose entries are
/// null, a device name, or an array of names, e.g.
///   [[null, "rxe0"], ["rxe0", null]]
/// Names are local to each rank's host. Channel c toward j uses
/// devices[i][j][c % n]. An empty entry means "no link": the endpoint exists
/// but carries nothing (a ring-only matrix has none between non-neighbours),
/// and both ends of a pair must agree on that (checked at connect time).
class DeviceMatrix {
 public:
  /// Reads and validates `path`; `size` is the communicator size, which must
  /// equal the row count. Throws Error(INVALID_ARGUMENT) naming the file,
  /// `origin` and what is wrong.
  static DeviceMatrix load(const std::string& path, const std::string& origin, int size);

  /// The device names `rank` uses toward `peer` (empty: no link).
  const std::vector<std::string>& entry(int rank, int peer) const {
    return rows_.at(static_cast<std::size_t>(rank)).at(static_cast<std::size_t>(peer));
  }
  /// Every distinct name in `rank`'s row, in first-use order.
  std::vector<std::string> names_used_by(int rank) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::vector<std::vector<std::string>>> rows_;
};

}  // namespace chorus::verbs
