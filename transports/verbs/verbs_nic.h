// Nic: one context's resources on one RDMA device — the opened device, its
// protection domain, the completion channel and completion queue every queue
// pair on it shares, the handshake (UD) queue pair and a discard buffer.
#pragma once

#include "verbs_config.h"
#include "verbs_wire.h"

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace chorus::verbs {

class Endpoint;

/// Destroys verbs objects for std::unique_ptr.
struct VerbsDeleter {
  void operator()(ibv_context* p) const { ibv_close_device(p); }
  void operator()(ibv_pd* p) const { ibv_dealloc_pd(p); }
  void operator()(ibv_comp_channel* p) const { ibv_destroy_comp_channel(p); }
  void operator()(ibv_cq* p) const { ibv_destroy_cq(p); }
  void operator()(ibv_qp* p) const { ibv_destroy_qp(p); }
  void operator()(ibv_mr* p) const { ibv_dereg_mr(p); }
  void operator()(ibv_ah* p) const { ibv_destroy_ah(p); }
};
template <class T>
using VerbsPtr = std::unique_ptr<T, VerbsDeleter>;

/// Threading: owned by its Context and used by the context's single caller
/// thread only.
class Nic {
 public:
  /// Opens `device` and sets up port, GID, PD, CQ and the handshake QP as
  /// `cfg` says. Throws Error: INVALID_ARGUMENT for a port or GID index that
  /// does not exist (naming those that do), UNAVAILABLE for a port that is
  /// not active, SYSTEM when the device refuses.
  Nic(ibv_device* device, const Config& cfg);
  ~Nic();
  Nic(const Nic&) = delete;
  Nic& operator=(const Nic&) = delete;

  const std::string& name() const { return name_; }
  /// Position in the context's device list (and in MemoryRegion::mrs).
  std::size_t index() const { return index_; }
  void set_index(std::size_t index) { index_ = index; }
  std::uint8_t port() const { return port_; }
  /// "rxe0 port 1", the start of every message about this device.
  std::string where() const { return name_ + " port " + std::to_string(port_); }
  /// "RoCE v2, GID 1 ::ffff:169.254.10.1, MTU 1024" for the log.
  std::string summary() const;

  ibv_context* context() const { return ctx_.get(); }
  ibv_pd* pd() const { return pd_.get(); }
  /// The completion queues: the first holds the handshake QP; endpoints
  /// are spread over as many as the device's max_cqe requires (reserve_cq).
  const std::vector<ibv_cq*>& cqs() const { return cq_list_; }
  int event_fd() const { return channel_->fd; }
  bool infiniband() const { return link_layer_ == IBV_LINK_LAYER_INFINIBAND; }
  bool global() const { return global_; }
  int gid_index() const { return gid_index_; }
  const ibv_gid& gid() const { return gid_; }
  std::uint16_t lid() const { return lid_; }
  ibv_mtu active_mtu() const { return active_mtu_; }
  std::uint64_t max_message_size() const { return max_msg_size_; }
  std::uint32_t max_qp_wr() const { return max_qp_wr_; }
  const Config& config() const { return cfg_; }

  /// The shared receive overflow: receives scatter into the caller's buffer
  /// and then here, so a message up to this much longer than its receive is
  /// caught in software and the queue pair survives.
  std::uint32_t discard_lkey() const { return discard_mr_->lkey; }
  std::uint64_t discard_addr() const { return reinterpret_cast<std::uintptr_t>(discard_.data()); }
  static constexpr std::uint32_t kDiscardBytes = 64 * 1024;

  /// A completion queue with room for `entries` more completions (one queue
  /// pair's send + receive depth): the first that has it (grown with
  /// ibv_resize_cq up to the device's max_cqe), else a new one on the same
  /// completion channel. So the number of endpoints is bounded by memory,
  /// not by one CQ's max_cqe (32767 on rdma_rxe: 31 endpoints at the default
  /// depth). Throws Error when one queue pair alone needs more than max_cqe.
  ibv_cq* reserve_cq(int entries);
  void release_cq(ibv_cq* cq, int entries);

  /// RC queue pairs on this device, by QP number, to route completions.
  std::unordered_map<std::uint32_t, Endpoint*>& endpoints_by_qp() { return by_qp_; }

  // ---- handshake (UD) ----
  std::uint32_t ud_qp_num() const { return ud_qp_->qp_num; }
  /// Sends one handshake datagram to `dest`'s UD QP. Returns false (and logs)
  /// when no send slot is free or the post fails; the caller retries.
  bool send_handshake(const Handshake& h, const Blob& dest);
  /// Called for a completion on the UD QP. For a received datagram, hands
  /// its payload to `on_message` and reposts the buffer.
  template <class F>
  void on_ud_completion(const ibv_wc& wc, F&& on_message) {
    const bool is_recv = (wc.wr_id & kRecvTag) != 0;
    const std::size_t slot = static_cast<std::size_t>(wc.wr_id & ~kRecvTag);
    if (!is_recv) {
      if (slot < kSlots) send_busy_[slot] = false;
      return;
    }
    if (slot >= kSlots) return;
    if (wc.status == IBV_WC_SUCCESS && wc.byte_len > kGrhBytes) {
      on_message(&recv_buf_[slot * kSlotBytes + kGrhBytes], wc.byte_len - kGrhBytes);
    }
    post_ud_recv(slot);
  }

  // ---- completion events ----
  /// ibv_req_notify_cq on each CQ not armed yet. Throws on failure.
  void arm();
  /// Reads every pending completion event (non-blocking); each CQ it names
  /// is then unarmed.
  void consume_events();

 private:
  static constexpr std::size_t kSlots = 32;
  static constexpr std::size_t kGrhBytes = 40;
  static constexpr std::size_t kSlotBytes = 256;
  static constexpr std::uint64_t kRecvTag = 1ull << 62;
  static constexpr std::uint32_t kQkey = 0x43485653;  // "CHVS"

  void choose_port(const Config& cfg, const ibv_device_attr& attr);
  void choose_gid(const Config& cfg);
  void create_handshake_qp();
  void post_ud_recv(std::size_t slot);
  ibv_ah* address_handle(const Blob& dest);

  std::string name_;
  std::size_t index_ = 0;
  Config cfg_;
  std::uint8_t port_ = 1;
  std::uint8_t link_layer_ = IBV_LINK_LAYER_UNSPECIFIED;
  ibv_mtu active_mtu_ = IBV_MTU_1024;
  std::uint64_t max_msg_size_ = 0;
  std::uint32_t max_qp_wr_ = 0;
  int max_cqe_ = 0;
  bool global_ = false;
  int gid_index_ = 0;
  ibv_gid gid_{};
  std::uint16_t lid_ = 0;
  std::string gid_kind_;

  // Declaration order is teardown order reversed: handles before the PD,
  // queue pairs before the CQ, the CQ before its channel.
  VerbsPtr<ibv_context> ctx_;
  VerbsPtr<ibv_pd> pd_;
  VerbsPtr<ibv_comp_channel> channel_;
  struct Cq {
    VerbsPtr<ibv_cq> cq;
    int size = 0;    // entries the CQ holds
    int needed = 0;  // entries reserved by the queue pairs on it
    bool armed = false;
    unsigned unacked_events = 0;
  };
  std::vector<Cq> cqs_;
  Cq& add_cq(int entries);
  std::vector<ibv_cq*> cq_list_;  // cqs_' handles, for progress (no allocation there)
  std::vector<unsigned char> discard_;
  std::vector<unsigned char> send_buf_;
  std::vector<unsigned char> recv_buf_;
  VerbsPtr<ibv_mr> discard_mr_;
  VerbsPtr<ibv_mr> send_mr_;
  VerbsPtr<ibv_mr> recv_mr_;
  VerbsPtr<ibv_qp> ud_qp_;
  std::map<std::pair<std::array<unsigned char, 16>, std::uint16_t>, VerbsPtr<ibv_ah>> ahs_;

  std::array<bool, kSlots> send_busy_{};
  std::unordered_map<std::uint32_t, Endpoint*> by_qp_;
};

}  // namespace chorus::verbs
