// Which Chorus transport a JACCL job runs over: the device matrix selects
// verbs (and its wires become channels) unless Chorus's configuration names a
// transport, which then wins.
#ifndef JACCL_SRC_TRANSPORT_CHOICE_H_
#define JACCL_SRC_TRANSPORT_CHOICE_H_

#include "device_file.h"

#include <string>
#include <vector>

namespace jaccl::detail {

/// What init adds to the job's settings for the device matrix.
struct TransportChoice {
  /// "key=value" settings for chorus_options_t::settings.
  std::vector<std::string> settings;
  /// The matrix written as JSON for the verbs transport; removed with this object.
  std::string devices_file;
  /// One line for the `info` log: which transport and why.
  std::string reason;
  /// The transport's name ("verbs", or the configured one).
  std::string transport;

  TransportChoice() = default;
  TransportChoice(const TransportChoice&) = delete;
  TransportChoice& operator=(const TransportChoice&) = delete;
  TransportChoice(TransportChoice&& other) noexcept;
  ~TransportChoice();
};

/// The most wires any pair of ranks has in `devices` (at least 1).
int wires_per_link(const DeviceMatrix& devices);

/// RDMA devices present on this host (/sys/class/infiniband), sorted.
std::vector<std::string> rdma_devices_here();

/// Decides the transport for a JACCL job of `rank` in `devices`. Throws
/// std::runtime_error, as JACCL does, when the matrix selects verbs and names a
/// device this host lacks, or when Chorus's configuration gives the job a size
/// other than the matrix's.
TransportChoice choose_transport(const DeviceMatrix& devices, int rank);

/// Writes `line` to stderr in Chorus's log format when its log level
/// (log.level, CHORUS_LOG) is info or more verbose.
void log_info(int rank, const std::string& line);

/// The configuration names a transport (file, environment or API): its
/// origin, or "" when Chorus's built-in default would apply.
std::string configured_transport_origin(std::string* name = nullptr);

}  // namespace jaccl::detail

#endif  // JACCL_SRC_TRANSPORT_CHOICE_H_
