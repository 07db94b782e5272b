// Config: the `transport.verbs.*` keys, parsed and validated.
#pragma once

#include <chorus/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace chorus::verbs {

/// Settings of one context; defaults are the documented ones (docs/verbs.md).
/// Each value keeps the origin it came from so a later check (a device that
/// does not exist, a GID index out of range) can name it.
struct Config {
  /// Device name; empty = the first device with an active port.
  std::string device;
  /// Port number; 0 = the device's first active port.
  int port = 0;
  /// GID table index; -1 = automatic (RoCE v2 with an IPv4-mapped address,
  /// then any RoCE v2, then the first valid entry; none on InfiniBand).
  int gid_index = -1;
  /// RC transport retries (0-7) and the local ACK timeout exponent
  /// (4.096 us * 2^timeout, 1-31). Not 7 by default: rdma_rxe reads a
  /// retry_cnt of 7 as "retry for ever" (as the spec does only for
  /// rnr_retry), which would hide a dead peer.
  int retry_count = 6;
  int timeout = 14;
  /// RNR retries; 7 means "retry for ever", so a send waiting for the
  /// peer's receive never fails (RC backpressure).
  int rnr_retry = 7;
  /// Path of a JACCL-style device matrix (JSON): devices[i][j] names the
  /// device(s) rank i uses toward rank j.
  std::string devices_file;
  /// Sends and receives that may be outstanding per endpoint.
  int queue_depth = 512;
  /// An endpoint with receives posted and no traffic for this long probes
  /// its peer (a zero-byte RDMA write), so a vanished peer fails the
  /// receives instead of leaving them hanging. 0 disables.
  int keepalive_ms = 1000;
  /// A polled connect (P10) whose hellos the peer has not answered for this
  /// long fails with TIMEOUT; 0: never (the caller's deadline bounds it).
  /// Over verbs a busy peer and a closed one look alike (neither answers),
  /// so this is the only way such a connect ends in an error by itself.
  int connect_poll_timeout_ms = 60000;
  /// GRH traffic class (RoCE: DSCP << 2 | ECN) and service level.
  int traffic_class = 0;
  int service_level = 0;

  std::string device_origin, port_origin, gid_index_origin, devices_file_origin;

  static constexpr int kMaxQueueDepth = 1 << 16;

  /// Parses the keys below `transport.verbs.`. Throws Error(INVALID_ARGUMENT)
  /// naming the key, its value, its origin and the valid keys or values.
  static Config parse(const chorus_kv_t* entries, std::size_t count);
};

/// "transport.verbs.<key> = '<value>' (from <origin>)" for messages.
std::string describe_setting(const std::string& key, const std::string& value,
                             const std::string& origin);

}  // namespace chorus::verbs
