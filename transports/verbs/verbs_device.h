// Device discovery: which RDMA devices, ports and GIDs this host has, how to
// pick one, and the inventory `describe` prints.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

namespace chorus::verbs {

/// The device list, owned (ibv_get_device_list / ibv_free_device_list).
class DeviceList {
 public:
  DeviceList();
  ~DeviceList();
  DeviceList(const DeviceList&) = delete;
  DeviceList& operator=(const DeviceList&) = delete;

  int size() const { return count_; }
  ibv_device* at(int i) const { return list_[i]; }
  /// NULL when no device has that name.
  ibv_device* find(const std::string& name) const;
  /// "rxe0, mlx5_0" or "none".
  std::string names() const;
  /// errno of a failed ibv_get_device_list (0 when it succeeded).
  int error() const { return error_; }

 private:
  ibv_device** list_ = nullptr;
  int count_ = 0;
  int error_ = 0;
};

/// One GID table entry that holds an address.
struct GidEntry {
  int index = 0;
  ibv_gid gid{};
  /// IBV_GID_TYPE_IB, IBV_GID_TYPE_ROCE_V1 or IBV_GID_TYPE_ROCE_V2.
  unsigned type = 0;
};

/// The non-zero entries of `port`'s GID table.
std::vector<GidEntry> query_gids(ibv_context* ctx, std::uint8_t port, int table_len);

/// Automatic GID choice on an Ethernet (RoCE) port: RoCE v2 with an
/// IPv4-mapped address first (routable, what rdma_cm uses), then any RoCE v2,
/// then the first valid entry. -1 when the table is empty.
int pick_gid(const std::vector<GidEntry>& gids);

std::string gid_text(const ibv_gid& gid);
const char* gid_type_name(unsigned type);
/// "RoCE" / "InfiniBand" / "unspecified".
const char* link_layer_name(std::uint8_t link_layer);
const char* port_state_name(ibv_port_state state);
/// 256 .. 4096 for IBV_MTU_*; 0 for anything else.
int mtu_bytes(ibv_mtu mtu);
/// "2 valid: 0 (fe80::1, RoCE v2), 1 (::ffff:10.0.0.1, RoCE v2)".
std::string gid_list_text(const std::vector<GidEntry>& gids);

/// The message of an absent fabric: no device at all.
std::string no_device_message(int list_errno);

/// The inventory for the `describe` op. Sets `usable` when at least one port
/// is active.
std::string describe_devices(bool& usable);

}  // namespace chorus::verbs
