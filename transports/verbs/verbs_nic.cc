#include "verbs_nic.h"

#include "verbs.h"
#include "verbs_device.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace chorus::verbs {

namespace {

[[noreturn]] void fail_system(const std::string& where, const std::string& what, int err) {
  throw Error(CHORUS_ERR_SYSTEM, where + ": " + what + " failed: " + errno_text(err));
}

}  // namespace

Nic::Nic(ibv_device* device, const Config& cfg) : name_(ibv_get_device_name(device)), cfg_(cfg) {
  ctx_.reset(ibv_open_device(device));
  if (!ctx_) fail_system(name_, "ibv_open_device", errno);
  ibv_device_attr attr{};
  if (int rc = ibv_query_device(ctx_.get(), &attr); rc != 0) {
    fail_system(name_, "ibv_query_device", rc);
  }
  max_qp_wr_ = static_cast<std::uint32_t>(std::max(attr.max_qp_wr, 2));
  max_cqe_ = attr.max_cqe;
  choose_port(cfg, attr);
  choose_gid(cfg);

  pd_.reset(ibv_alloc_pd(ctx_.get()));
  if (!pd_) fail_system(where(), "ibv_alloc_pd", errno);
  channel_.reset(ibv_create_comp_channel(ctx_.get()));
  if (!channel_) fail_system(where(), "ibv_create_comp_channel", errno);
  const int flags = ::fcntl(channel_->fd, F_GETFL);
  if (flags < 0 || ::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    fail_system(where(), "making the completion channel non-blocking", errno);
  }
  add_cq(static_cast<int>(2 * kSlots));  // the handshake QP's

  discard_.resize(kDiscardBytes);
  discard_mr_.reset(
      ibv_reg_mr(pd_.get(), discard_.data(), discard_.size(), IBV_ACCESS_LOCAL_WRITE));
  if (!discard_mr_) fail_system(where(), "registering the discard buffer", errno);
  create_handshake_qp();
}

Nic::~Nic() {
  // Every queue pair of the endpoints is gone by now (the Context closes
  // them first). Events must be acknowledged before the CQ is destroyed.
  for (Cq& c : cqs_) {
    if (c.unacked_events > 0) ibv_ack_cq_events(c.cq.get(), c.unacked_events);
  }
  ahs_.clear();
  ud_qp_.reset();
}

void Nic::choose_port(const Config& cfg, const ibv_device_attr& attr) {
  std::string states;
  for (int p = 1; p <= attr.phys_port_cnt; ++p) {
    ibv_port_attr pa{};
    if (ibv_query_port(ctx_.get(), static_cast<std::uint8_t>(p), &pa) != 0) continue;
    states += (states.empty() ? "" : ", ") + std::string("port ") + std::to_string(p) + " " +
              port_state_name(pa.state);
    if (cfg.port != 0 && cfg.port != p) continue;
    if (pa.state != IBV_PORT_ACTIVE) {
      if (cfg.port == p) {
        throw Error(CHORUS_ERR_UNAVAILABLE,
                    name_ + " port " + std::to_string(p) + " is " + port_state_name(pa.state) +
                        ", not ACTIVE (" +
                        describe_setting("port", std::to_string(p), cfg.port_origin) +
                        "); check the link or pick another port");
      }
      continue;
    }
    port_ = static_cast<std::uint8_t>(p);
    link_layer_ = pa.link_layer;
    active_mtu_ = pa.active_mtu;
    max_msg_size_ = pa.max_msg_sz;
    lid_ = pa.lid;
    return;
  }
  if (cfg.port != 0) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                describe_setting("port", std::to_string(cfg.port), cfg.port_origin) + ": " + name_ +
                    " has " + std::to_string(attr.phys_port_cnt) + " port(s): " + states);
  }
  throw Error(CHORUS_ERR_UNAVAILABLE, name_ + " has no ACTIVE port (" +
                                          (states.empty() ? "no ports" : states) +
                                          "); check the link or pick another device");
}

void Nic::choose_gid(const Config& cfg) {
  ibv_port_attr pa{};
  if (int rc = ibv_query_port(ctx_.get(), port_, &pa); rc != 0) {
    fail_system(where(), "ibv_query_port", rc);
  }
  const auto gids = query_gids(ctx_.get(), port_, pa.gid_tbl_len);
  const bool ib = link_layer_ == IBV_LINK_LAYER_INFINIBAND;
  int index = cfg.gid_index;
  if (index >= 0) {
    const auto it =
        std::find_if(gids.begin(), gids.end(), [&](const GidEntry& g) { return g.index == index; });
    if (it == gids.end()) {
      throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                  describe_setting("gid_index", std::to_string(index), cfg.gid_index_origin) +
                      " is not a valid GID on " + where() + " (table of " +
                      std::to_string(pa.gid_tbl_len) + " entries, " + gid_list_text(gids) + ")");
    }
  } else if (ib) {
    index = -1;  // InfiniBand: LID routing, no GRH
  } else {
    index = pick_gid(gids);
    if (index < 0) {
      throw Error(CHORUS_ERR_UNAVAILABLE,
                  where() +
                      " (RoCE) has no GID: give its network interface an address or "
                      "bring it up");
    }
  }
  if (index >= 0) {
    for (const auto& g : gids) {
      if (g.index == index) {
        gid_ = g.gid;
        gid_kind_ = gid_type_name(g.type);
      }
    }
    gid_index_ = index;
    global_ = true;
  } else {
    if (lid_ == 0) {
      throw Error(CHORUS_ERR_UNAVAILABLE,
                  where() +
                      " (InfiniBand) has no LID: is a subnet manager running? (or set "
                      "transport.verbs.gid_index to route by GID)");
    }
    gid_kind_ = "InfiniBand";
  }
}

std::string Nic::summary() const {
  std::string s = where() + " (" + gid_kind_;
  if (global_) s += ", GID " + std::to_string(gid_index_) + " " + gid_text(gid_);
  if (!global_ || infiniband()) s += ", LID " + std::to_string(lid_);
  s += ", MTU " + std::to_string(mtu_bytes(active_mtu_)) + ")";
  return s;
}

Nic::Cq& Nic::add_cq(int entries) {
  Cq c;
  c.size = std::min(max_cqe_, std::max(entries, static_cast<int>(4 * kSlots)));
  c.cq.reset(ibv_create_cq(ctx_.get(), c.size, nullptr, channel_.get(), 0));
  if (!c.cq) {
    fail_system(where(),
                "ibv_create_cq (" + std::to_string(c.size) + " entries, completion queue " +
                    std::to_string(cqs_.size() + 1) + ")",
                errno);
  }
  c.size = c.cq->cqe;
  c.needed = entries;
  cq_list_.push_back(c.cq.get());
  cqs_.push_back(std::move(c));
  return cqs_.back();
}

ibv_cq* Nic::reserve_cq(int entries) {
  if (entries > max_cqe_) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                where() + ": one endpoint needs " + std::to_string(entries) +
                    " completion-queue entries but the device allows " + std::to_string(max_cqe_) +
                    " per queue; lower transport.verbs.queue_depth (each endpoint needs 2 x "
                    "depth + 1)");
  }
  for (Cq& c : cqs_) {
    const int needed = c.needed + entries;
    if (needed > max_cqe_) continue;
    if (needed > c.size) {
      const int want = std::min(max_cqe_, std::max(needed, c.size * 2));
      if (int rc = ibv_resize_cq(c.cq.get(), want); rc != 0) {
        fail_system(where(), "growing a completion queue to " + std::to_string(want) + " entries",
                    rc);
      }
      c.size = c.cq->cqe;
    }
    c.needed = needed;
    return c.cq.get();
  }
  return add_cq(entries).cq.get();
}

void Nic::release_cq(ibv_cq* cq, int entries) {
  for (Cq& c : cqs_) {
    if (c.cq.get() == cq) c.needed -= entries;
  }
}

void Nic::create_handshake_qp() {
  ibv_qp_init_attr init{};
  init.send_cq = cqs_.front().cq.get();
  init.recv_cq = cqs_.front().cq.get();
  init.qp_type = IBV_QPT_UD;
  init.cap.max_send_wr = kSlots;
  init.cap.max_recv_wr = kSlots;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ud_qp_.reset(ibv_create_qp(pd_.get(), &init));
  if (!ud_qp_) fail_system(where(), "creating the handshake (UD) queue pair", errno);

  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = port_;
  a.qkey = kQkey;
  if (int rc = ibv_modify_qp(ud_qp_.get(), &a,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
      rc != 0) {
    fail_system(where(), "handshake QP to INIT", rc);
  }
  a = {};
  a.qp_state = IBV_QPS_RTR;
  if (int rc = ibv_modify_qp(ud_qp_.get(), &a, IBV_QP_STATE); rc != 0) {
    fail_system(where(), "handshake QP to RTR", rc);
  }
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  if (int rc = ibv_modify_qp(ud_qp_.get(), &a, IBV_QP_STATE | IBV_QP_SQ_PSN); rc != 0) {
    fail_system(where(), "handshake QP to RTS", rc);
  }

  send_buf_.assign(kSlots * kSlotBytes, 0);
  recv_buf_.assign(kSlots * kSlotBytes, 0);
  send_mr_.reset(ibv_reg_mr(pd_.get(), send_buf_.data(), send_buf_.size(), 0));
  recv_mr_.reset(ibv_reg_mr(pd_.get(), recv_buf_.data(), recv_buf_.size(), IBV_ACCESS_LOCAL_WRITE));
  if (!send_mr_ || !recv_mr_) fail_system(where(), "registering handshake buffers", errno);
  for (std::size_t i = 0; i < kSlots; ++i) post_ud_recv(i);
}

void Nic::post_ud_recv(std::size_t slot) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<std::uintptr_t>(&recv_buf_[slot * kSlotBytes]);
  sge.length = static_cast<std::uint32_t>(kSlotBytes);
  sge.lkey = recv_mr_->lkey;
  ibv_recv_wr wr{};
  wr.wr_id = kRecvTag | slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(ud_qp_.get(), &wr, &bad); rc != 0) {
    log(CHORUS_LOG_WARN, where() + ": reposting a handshake receive failed: " + errno_text(rc));
  }
}

ibv_ah* Nic::address_handle(const Blob& dest) {
  auto key = std::make_pair(dest.gid, dest.lid);
  if (auto it = ahs_.find(key); it != ahs_.end()) return it->second.get();
  ibv_ah_attr a{};
  a.port_num = port_;
  a.dlid = dest.lid;
  a.sl = static_cast<std::uint8_t>(cfg_.service_level);
  if (global_) {
    a.is_global = 1;
    std::memcpy(a.grh.dgid.raw, dest.gid.data(), 16);
    a.grh.sgid_index = static_cast<std::uint8_t>(gid_index_);
    a.grh.hop_limit = 64;
    a.grh.traffic_class = static_cast<std::uint8_t>(cfg_.traffic_class);
  }
  VerbsPtr<ibv_ah> ah(ibv_create_ah(pd_.get(), &a));
  if (!ah) {
    log(CHORUS_LOG_WARN, where() + ": cannot make an address handle for GID " +
                             gid_text(*reinterpret_cast<const ibv_gid*>(dest.gid.data())) + ": " +
                             errno_text(errno));
    return nullptr;
  }
  return ahs_.emplace(key, std::move(ah)).first->second.get();
}

bool Nic::send_handshake(const Handshake& h, const Blob& dest) {
  std::size_t slot = kSlots;
  for (std::size_t i = 0; i < kSlots; ++i) {
    if (!send_busy_[i]) {
      slot = i;
      break;
    }
  }
  if (slot == kSlots) return false;
  ibv_ah* ah = address_handle(dest);
  if (ah == nullptr) return false;
  unsigned char* buf = &send_buf_[slot * kSlotBytes];
  h.encode(buf);
  ibv_sge sge{};
  sge.addr = reinterpret_cast<std::uintptr_t>(buf);
  sge.length = static_cast<std::uint32_t>(Handshake::kSize);
  sge.lkey = send_mr_->lkey;
  ibv_send_wr wr{};
  wr.wr_id = slot;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = dest.ud_qp_num;
  wr.wr.ud.remote_qkey = kQkey;
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(ud_qp_.get(), &wr, &bad); rc != 0) {
    log(CHORUS_LOG_WARN, where() + ": posting a handshake datagram failed: " + errno_text(rc));
    return false;
  }
  send_busy_[slot] = true;
  return true;
}

void Nic::arm() {
  for (Cq& c : cqs_) {
    if (c.armed) continue;
    if (int rc = ibv_req_notify_cq(c.cq.get(), 0); rc != 0) {
      throw Error(CHORUS_ERR_SYSTEM, where() + ": ibv_req_notify_cq failed: " + errno_text(rc));
    }
    c.armed = true;
  }
}

void Nic::consume_events() {
  for (;;) {
    ibv_cq* cq = nullptr;
    void* user = nullptr;
    if (ibv_get_cq_event(channel_.get(), &cq, &user) != 0) break;  // EAGAIN: none left
    for (Cq& c : cqs_) {
      if (c.cq.get() != cq) continue;
      c.armed = false;
      if (++c.unacked_events >= 64) {
        ibv_ack_cq_events(c.cq.get(), c.unacked_events);
        c.unacked_events = 0;
      }
    }
  }
}

}  // namespace chorus::verbs
