#include "verbs_device.h"

#include "verbs.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <memory>

namespace chorus::verbs {

DeviceList::DeviceList() {
  errno = 0;
  list_ = ibv_get_device_list(&count_);
  if (list_ == nullptr) {
    error_ = errno;
    count_ = 0;
  }
}

DeviceList::~DeviceList() {
  if (list_ != nullptr) ibv_free_device_list(list_);
}

ibv_device* DeviceList::find(const std::string& name) const {
  for (int i = 0; i < count_; ++i) {
    if (name == ibv_get_device_name(list_[i])) return list_[i];
  }
  return nullptr;
}

std::string DeviceList::names() const {
  if (count_ == 0) return "none";
  std::string out;
  for (int i = 0; i < count_; ++i) {
    if (i > 0) out += ", ";
    out += ibv_get_device_name(list_[i]);
  }
  return out;
}

std::vector<GidEntry> query_gids(ibv_context* ctx, std::uint8_t port, int table_len) {
  std::vector<GidEntry> out;
  for (int i = 0; i < table_len; ++i) {
    ibv_gid_entry entry{};
    if (ibv_query_gid_ex(ctx, port, static_cast<std::uint32_t>(i), &entry, 0) != 0) continue;
    static const ibv_gid kZero{};
    if (std::memcmp(&entry.gid, &kZero, sizeof kZero) == 0) continue;
    GidEntry g;
    g.index = i;
    g.gid = entry.gid;
    g.type = entry.gid_type;
    out.push_back(g);
  }
  return out;
}

int pick_gid(const std::vector<GidEntry>& gids) {
  auto ipv4_mapped = [](const ibv_gid& g) {
    static const unsigned char kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(g.raw, kPrefix, sizeof kPrefix) == 0;
  };
  for (const auto& g : gids) {
    if (g.type == IBV_GID_TYPE_ROCE_V2 && ipv4_mapped(g.gid)) return g.index;
  }
  for (const auto& g : gids) {
    if (g.type == IBV_GID_TYPE_ROCE_V2) return g.index;
  }
  return gids.empty() ? -1 : gids.front().index;
}

std::string gid_text(const ibv_gid& gid) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (inet_ntop(AF_INET6, gid.raw, buf, sizeof buf) == nullptr) return "?";
  return buf;
}

const char* gid_type_name(unsigned type) {
  switch (type) {
    case IBV_GID_TYPE_IB:
      return "IB";
    case IBV_GID_TYPE_ROCE_V1:
      return "RoCE v1";
    case IBV_GID_TYPE_ROCE_V2:
      return "RoCE v2";
    default:
      return "unknown type";
  }
}

const char* link_layer_name(std::uint8_t link_layer) {
  switch (link_layer) {
    case IBV_LINK_LAYER_ETHERNET:
      return "RoCE";
    case IBV_LINK_LAYER_INFINIBAND:
      return "InfiniBand";
    default:
      return "unspecified link layer";
  }
}

const char* port_state_name(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_NOP:
      return "NOP";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
    default:
      return "unknown";
  }
}

int mtu_bytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
    default:
      return 0;
  }
}

std::string gid_list_text(const std::vector<GidEntry>& gids) {
  if (gids.empty()) return "the GID table is empty";
  std::string out = std::to_string(gids.size()) + " valid: ";
  for (std::size_t i = 0; i < gids.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(gids[i].index) + " (" + gid_text(gids[i].gid) + ", " +
           gid_type_name(gids[i].type) + ")";
  }
  return out;
}

std::string no_device_message(int list_errno) {
  std::string msg =
      "no RDMA device found (ibv_get_device_list returned 0 devices); load rdma_rxe/siw or "
      "pick another transport";
  if (list_errno != 0) msg += " (ibv_get_device_list: " + errno_text(list_errno) + ")";
  return msg;
}

std::string describe_devices(bool& usable) {
  usable = false;
  DeviceList list;
  if (list.size() == 0) return "0 devices: " + no_device_message(list.error());
  std::string out = std::to_string(list.size()) + (list.size() == 1 ? " device: " : " devices: ");
  for (int d = 0; d < list.size(); ++d) {
    const char* name = ibv_get_device_name(list.at(d));
    if (d > 0) out += "; ";
    std::unique_ptr<ibv_context, int (*)(ibv_context*)> ctx(ibv_open_device(list.at(d)),
                                                            ibv_close_device);
    ibv_device_attr attr{};
    if (!ctx || ibv_query_device(ctx.get(), &attr) != 0) {
      out += std::string(name) + " (cannot open: " + errno_text(errno) + ")";
      continue;
    }
    for (int p = 1; p <= attr.phys_port_cnt; ++p) {
      ibv_port_attr pa{};
      if (p > 1) out += ", ";
      out += std::string(name) + " port " + std::to_string(p);
      if (ibv_query_port(ctx.get(), static_cast<std::uint8_t>(p), &pa) != 0) {
        out += " (cannot query)";
        continue;
      }
      std::string kind = link_layer_name(pa.link_layer);
      if (pa.link_layer == IBV_LINK_LAYER_ETHERNET) {
        const auto gids = query_gids(ctx.get(), static_cast<std::uint8_t>(p), pa.gid_tbl_len);
        const int g = pick_gid(gids);
        for (const auto& e : gids) {
          if (e.index == g) kind = gid_type_name(e.type);
        }
      }
      out += " (" + kind + ", " + port_state_name(pa.state);
      if (pa.state == IBV_PORT_ACTIVE) {
        usable = true;
        out += ", MTU " + std::to_string(mtu_bytes(pa.active_mtu));
      }
      out += ")";
    }
  }
  return out;
}

}  // namespace chorus::verbs
