#include "verbs_endpoint.h"

#include <chorus/transport_names.hpp>
#include "verbs.h"
#include "verbs_context.h"
#include "verbs_device.h"
#include "verbs_memory_region.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <random>

namespace chorus::verbs {

namespace {

using Clock = std::chrono::steady_clock;

/// Bit 63 of a hardware wr_id marks the receive queue, so a failed
/// completion (whose opcode is undefined) still says which queue it is from.
constexpr std::uint64_t kRecvBit = 1ull << 63;

/// Retry-exceeded and flushes mean the pair is gone; a length error is the
/// caller's mismatch; anything else is the NIC's word.
int status_for(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_WR_FLUSH_ERR:
    case IBV_WC_REM_ABORT_ERR:
    case IBV_WC_REM_OP_ERR:  // the peer's QP went to error (e.g. its process is being killed)
    case IBV_WC_RESP_TIMEOUT_ERR:
      return CHORUS_ERR_PEER_LOST;
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
      return CHORUS_ERR_INVALID_ARGUMENT;
    default:
      return CHORUS_ERR_SYSTEM;
  }
}

std::string status_text(ibv_wc_status s) {
  return std::string(ibv_wc_status_str(s)) + " (status " + std::to_string(static_cast<int>(s)) +
         ")";
}

std::uint32_t random_psn() {
  static thread_local std::mt19937 rng{std::random_device{}()};
  return rng() & 0xffffffu;
}

}  // namespace

Endpoint::Endpoint(Context& ctx, Nic* nic, ibv_cq* cq, int peer_rank, int channel,
                   std::uint32_t depth, std::uint64_t nonce)
    : EndpointBase(ctx, peer_rank, channel),
      nic_(nic),
      cq_(cq),
      depth_(depth),
      nonce_(nonce),
      sends_(depth + 1),
      recvs_(depth) {
  local_.rank = ctx.rank();
  local_.peer_rank = peer_rank;
  local_.channel = channel;
  local_.nonce = nonce;
  if (nic_ == nullptr) {
    local_.flags = Blob::kNoLink;
    return;
  }
  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  init.cap.max_send_wr = depth + 1;  // + one keepalive probe
  init.cap.max_recv_wr = depth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 2;  // the caller's buffer, then the discard overflow
  init.cap.max_inline_data = 64;
  qp_.reset(ibv_create_qp(nic_->pd(), &init));
  if (!qp_) {
    init.cap.max_inline_data = 0;
    qp_.reset(ibv_create_qp(nic_->pd(), &init));
  }
  if (!qp_) {
    throw Error(CHORUS_ERR_SYSTEM, where() + ": ibv_create_qp (RC, depth " + std::to_string(depth) +
                                       ") failed: " + errno_text(errno));
  }
  max_inline_ = init.cap.max_inline_data;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = nic_->port();
  // Remote write only so a zero-byte keepalive probe is accepted: no region
  // is ever registered with remote access, so nothing can be written.
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (int rc = ibv_modify_qp(qp_.get(), &a,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
      rc != 0) {
    throw Error(CHORUS_ERR_SYSTEM, where() + ": queue pair to INIT failed: " + errno_text(rc));
  }
  psn_ = random_psn();
  local_.flags = static_cast<std::uint8_t>((nic_->infiniband() ? Blob::kInfiniBand : 0) |
                                           (nic_->global() ? Blob::kGlobal : 0));
  local_.mtu = static_cast<std::uint8_t>(nic_->active_mtu());
  local_.qp_num = qp_->qp_num;
  local_.psn = psn_;
  local_.ud_qp_num = nic_->ud_qp_num();
  local_.lid = nic_->lid();
  local_.gid_index = static_cast<std::uint8_t>(nic_->global() ? nic_->gid_index() : 0);
  std::copy_n(nic_->gid().raw, 16, local_.gid.begin());
}

Endpoint::~Endpoint() { destroy_qp(); }

std::string Endpoint::where() const {
  std::string s = nic_ != nullptr ? nic_->where() + ", " : std::string();
  s += "peer rank " + std::to_string(peer_rank_);
  if (channel_ > 0) s += ", " + channel_name(channel_, ctx_.data_channels());
  return s;
}

void Endpoint::adopt(const Blob& peer) {
  const Config& cfg = ctx_.config();
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = std::min(nic_->active_mtu(), static_cast<ibv_mtu>(peer.mtu));
  a.dest_qp_num = peer.qp_num;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;  // 0.64 ms before an RNR-NAKed send is retried
  a.ah_attr.port_num = nic_->port();
  a.ah_attr.dlid = peer.lid;
  a.ah_attr.sl = static_cast<std::uint8_t>(cfg.service_level);
  if (nic_->global()) {
    a.ah_attr.is_global = 1;
    std::copy(peer.gid.begin(), peer.gid.end(), a.ah_attr.grh.dgid.raw);
    a.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(nic_->gid_index());
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.traffic_class = static_cast<std::uint8_t>(cfg.traffic_class);
  }
  if (int rc = ibv_modify_qp(qp_.get(), &a,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
      rc != 0) {
    throw Error(CHORUS_ERR_SYSTEM,
                where() + ": queue pair to RTR failed: " + errno_text(rc) + " (peer GID " +
                    gid_text(*reinterpret_cast<const ibv_gid*>(peer.gid.data())) + ", LID " +
                    std::to_string(peer.lid) + ", local GID index " +
                    std::to_string(nic_->gid_index()) +
                    "; a GID index whose address the peer cannot reach fails here)");
  }
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = static_cast<std::uint8_t>(cfg.timeout);
  a.retry_cnt = static_cast<std::uint8_t>(cfg.retry_count);
  a.rnr_retry = static_cast<std::uint8_t>(cfg.rnr_retry);
  a.sq_psn = psn_;
  a.max_rd_atomic = 1;
  if (int rc = ibv_modify_qp(qp_.get(), &a,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
      rc != 0) {
    throw Error(CHORUS_ERR_SYSTEM, where() + ": queue pair to RTS failed: " + errno_text(rc));
  }
  peer_ = peer;
  state_ = State::Connected;
  last_alive_ = Clock::now();
}

void Endpoint::abandon(int status, const std::string& why) {
  if (state_ == State::Failed) return;
  if (qp_) {
    // The peer may still adopt this side's blob from a late hello: its
    // sends then fail (retries exceeded) instead of reaching a QP nobody reads.
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(qp_.get(), &a, IBV_QP_STATE);
  }
  failure_status_ = status;
  fail(why);
}

void Endpoint::fail(const std::string& why) {
  if (state_ == State::Failed) return;
  state_ = State::Failed;
  failure_ = why;
  log(CHORUS_LOG_WARN, why);
}

int Endpoint::post_failed(const std::string& op) {
  if (no_link()) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                          op + ": rank " + std::to_string(ctx_.rank()) + " has no device toward " +
                              where() +
                              " in transport.verbs.devices_file (its entry is null), so this "
                              "pair cannot exchange messages");
  }
  if (state_ == State::Open) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                          op + ": " + where() + ": the endpoint is not connected yet");
  }
  return set_last_error(failure_status_,
                        op + ": " + where() + ": the endpoint failed: " + failure_);
}

int Endpoint::lkey_for(const void* buf, std::size_t length, MemoryRegion* mr, bool writable,
                       WorkRequest& w, std::uint32_t& lkey) {
  const auto addr = reinterpret_cast<std::uintptr_t>(buf);
  if (mr != nullptr) {
    if (!ctx_.owns(static_cast<chorus_tp_mr*>(mr))) {
      return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                            where() + ": the registration handle is not one of this context's");
    }
    if (!mr->covers(addr, length) || mr->mrs.size() <= nic_->index()) {
      return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                            where() + ": buffer [" + std::to_string(addr) + ", +" +
                                std::to_string(length) + ") lies outside its registration [" +
                                std::to_string(mr->addr) + ", +" + std::to_string(mr->length) +
                                ")");
    }
    lkey = mr->mrs[nic_->index()]->lkey;
    return CHORUS_OK;
  }
  // No registration given: register this range for the duration of the post.
  // Correct but slow (pins pages per post); callers on a hot path register.
  ibv_mr* m =
      ibv_reg_mr(nic_->pd(), const_cast<void*>(buf), length, writable ? IBV_ACCESS_LOCAL_WRITE : 0);
  if (m == nullptr) {
    return set_last_error(
        CHORUS_ERR_SYSTEM,
        where() + ": registering " + std::to_string(length) +
            " unregistered bytes for this post failed: " + errno_text(errno) +
            (errno == ENOMEM ? " (raise the locked-memory limit, ulimit -l)" : ""));
  }
  w.auto_mr = m;
  lkey = m->lkey;
  return CHORUS_OK;
}

int Endpoint::send(const void* buf, std::size_t length, MemoryRegion* mr, std::uint64_t wr_id,
                   ibv_wr_opcode opcode, std::uint32_t imm) {
  if (state_ != State::Connected || no_link()) return post_failed("post_send");
  if (length > 0 && buf == nullptr) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "post_send: NULL buffer");
  }
  if (length > nic_->max_message_size()) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                          "post_send: " + std::to_string(length) + " bytes exceed " +
                              nic_->where() + "'s max message size " +
                              std::to_string(nic_->max_message_size()));
  }
  if (sends_outstanding_ >= depth_) {
    return set_last_error(CHORUS_ERR_AGAIN, "post_send: " + std::to_string(depth_) +
                                                " sends outstanding on " + where());
  }
  WorkRequest w;
  w.seq = next_send_seq_;
  w.wr_id = wr_id;
  w.length = length;
  ibv_sge sge{};
  ibv_send_wr wr{};
  wr.wr_id = w.seq;
  wr.opcode = opcode;
  if (opcode == IBV_WR_SEND_WITH_IMM) wr.imm_data = htonl(imm);  // network order on the wire
  wr.send_flags = IBV_SEND_SIGNALED;
  if (length > 0) {
    sge.addr = reinterpret_cast<std::uintptr_t>(buf);
    sge.length = static_cast<std::uint32_t>(length);
    if (mr == nullptr && length <= max_inline_) {
      wr.send_flags |= IBV_SEND_INLINE;  // copied at post time: no registration needed
    } else if (int rc = lkey_for(buf, length, mr, false, w, sge.lkey); rc != CHORUS_OK) {
      return rc;
    }
    wr.sg_list = &sge;
    wr.num_sge = 1;
  }
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp_.get(), &wr, &bad); rc != 0) {
    if (w.auto_mr != nullptr) ibv_dereg_mr(w.auto_mr);
    return set_last_error(CHORUS_ERR_SYSTEM,
                          "post_send: " + where() + ": ibv_post_send failed: " + errno_text(rc));
  }
  sends_.push(w);
  ++next_send_seq_;
  ++sends_outstanding_;
  return CHORUS_OK;
}

int Endpoint::post_recv(void* buf, std::size_t length, MemoryRegion* mr, std::uint64_t wr_id) {
  if (state_ != State::Connected || no_link()) return post_failed("post_recv");
  if (length > 0 && buf == nullptr) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT, "post_recv: NULL buffer");
  }
  if (recvs_outstanding_ >= depth_) {
    return set_last_error(CHORUS_ERR_AGAIN, "post_recv: " + std::to_string(depth_) +
                                                " receives outstanding on " + where());
  }
  WorkRequest w;
  w.seq = next_recv_seq_ | kRecvBit;
  w.wr_id = wr_id;
  w.length = length;
  ibv_sge sge[2]{};
  int n = 0;
  if (length > 0) {
    if (length > 0xffffffffull) length = 0xffffffffull;  // an SGE holds 32 bits; caps bound it
    sge[0].addr = reinterpret_cast<std::uintptr_t>(buf);
    sge[0].length = static_cast<std::uint32_t>(length);
    if (int rc = lkey_for(buf, length, mr, true, w, sge[0].lkey); rc != CHORUS_OK) return rc;
    ++n;
  }
  sge[n].addr = nic_->discard_addr();
  sge[n].length = Nic::kDiscardBytes;
  sge[n].lkey = nic_->discard_lkey();
  ++n;
  ibv_recv_wr wr{};
  wr.wr_id = w.seq;
  wr.sg_list = sge;
  wr.num_sge = n;
  ibv_recv_wr* bad = nullptr;
  if (int rc = ibv_post_recv(qp_.get(), &wr, &bad); rc != 0) {
    if (w.auto_mr != nullptr) ibv_dereg_mr(w.auto_mr);
    return set_last_error(CHORUS_ERR_SYSTEM,
                          "post_recv: " + where() + ": ibv_post_recv failed: " + errno_text(rc));
  }
  recvs_.push(w);
  ++next_recv_seq_;
  ++recvs_outstanding_;
  return CHORUS_OK;
}

std::string Endpoint::completion_message(const ibv_wc& wc, const WorkRequest& w, bool recv) const {
  std::string msg = where() + ": " + status_text(wc.status);
  switch (wc.status) {
    case IBV_WC_RETRY_EXC_ERR:
      msg += "; rank " + std::to_string(peer_rank_) +
             " stopped answering (process gone, endpoint closed or link down)";
      break;
    case IBV_WC_RNR_RETRY_EXC_ERR:
      msg += "; rank " + std::to_string(peer_rank_) +
             " posted no receive in time (transport.verbs.rnr_retry = 7 waits for ever)";
      break;
    case IBV_WC_WR_FLUSH_ERR:
      msg += failure_.empty() ? std::string("; the endpoint was closed")
                              : "; after: " + failure_.substr(failure_.find(": ") + 2);
      break;
    case IBV_WC_LOC_LEN_ERR:
      if (recv) {
        msg += "; a message longer than this " + std::to_string(w.length) + "-byte receive (plus " +
               std::to_string(Nic::kDiscardBytes / 1024) +
               " KiB of discard space) arrived; on RC this breaks the queue pair";
      }
      break;
    case IBV_WC_REM_INV_REQ_ERR:
      if (!recv) {
        msg += "; rank " + std::to_string(peer_rank_) + " rejected this " +
               std::to_string(w.length) +
               "-byte message (its receive was too short); on RC this breaks the queue pair";
      }
      break;
    default:
      break;
  }
  return msg;
}

void Endpoint::on_completion(const ibv_wc& wc) {
  const bool recv = (wc.wr_id & kRecvBit) != 0;
  WorkRing& ring = recv ? recvs_ : sends_;
  if (ring.empty() || ring.front().seq != wc.wr_id) {
    // Completions of one queue come in post order; anything else is a
    // driver bug. Fail loudly rather than misattribute buffers.
    fail(where() + ": completion " + std::to_string(wc.wr_id & ~kRecvBit) +
         " arrived out of order; the endpoint is unusable (internal error)");
    return;
  }
  const WorkRequest w = ring.pop();
  if (w.auto_mr != nullptr) ibv_dereg_mr(w.auto_mr);
  if (w.probe) probe_in_flight_ = false;
  CompletionQueue& cq = ctx_.cq();
  if (wc.status == IBV_WC_SUCCESS) {
    last_alive_ = Clock::now();
    if (w.probe) return;
    if (!recv) {
      cq.push(handle(), CHORUS_TP_SEND, w.wr_id, w.length);
    } else if (wc.byte_len > w.length) {
      // The overflow went to the discard buffer: a short receive caught in
      // software, and the queue pair is still good.
      cq.push_error(handle(), CHORUS_TP_RECV, w.wr_id, CHORUS_ERR_INVALID_ARGUMENT, peer_rank_,
                    where() + ": message of " + std::to_string(wc.byte_len) +
                        " bytes arrived for a receive of " + std::to_string(w.length) +
                        " bytes; the message was discarded");
    } else {
      cq.push(handle(), CHORUS_TP_RECV, w.wr_id, wc.byte_len,
              (wc.wc_flags & IBV_WC_WITH_IMM) ? ntohl(wc.imm_data) : 0);
    }
    return;
  }
  const std::string msg = completion_message(wc, w, recv);
  if (wc.status != IBV_WC_WR_FLUSH_ERR || failure_.empty()) fail(msg);
  if (w.probe) return;
  cq.push_error(handle(), recv ? CHORUS_TP_RECV : CHORUS_TP_SEND, w.wr_id, status_for(wc.status),
                peer_rank_, msg);
}

void Endpoint::on_reaped(std::uint32_t opcode) {
  if (opcode == CHORUS_TP_SEND) {
    if (sends_outstanding_ > 0) --sends_outstanding_;
  } else if (opcode == CHORUS_TP_RECV && recvs_outstanding_ > 0) {  // not a connect request
    --recvs_outstanding_;
  }
}

int Endpoint::maintain(Clock::time_point now) {
  const int every = ctx_.config().keepalive_ms;
  if (every <= 0 || state_ != State::Connected || no_link() || recvs_.empty() || probe_in_flight_) {
    return -1;
  }
  const auto due = last_alive_ + std::chrono::milliseconds(every);
  if (now < due) {
    return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(due - now).count());
  }
  WorkRequest w;
  w.seq = next_send_seq_;
  w.probe = true;
  ibv_send_wr wr{};
  wr.wr_id = w.seq;
  wr.opcode = IBV_WR_RDMA_WRITE;  // zero bytes: needs no rkey, consumes no receive
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.num_sge = 0;
  ibv_send_wr* bad = nullptr;
  if (sends_.full()) return -1;
  if (int rc = ibv_post_send(qp_.get(), &wr, &bad); rc != 0) {
    log(CHORUS_LOG_WARN, where() + ": posting a keepalive probe failed: " + errno_text(rc));
    last_alive_ = now;  // try again one period later
    return every;
  }
  sends_.push(w);
  ++next_send_seq_;
  probe_in_flight_ = true;
  return -1;
}

void Endpoint::destroy_qp() {
  if (qp_) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(qp_.get(), &a, IBV_QP_STATE);
    qp_.reset();
  }
  // The hardware no longer touches the buffers: release per-post registrations.
  while (!sends_.empty()) {
    const WorkRequest w = sends_.pop();
    if (w.auto_mr != nullptr) ibv_dereg_mr(w.auto_mr);
  }
  while (!recvs_.empty()) {
    const WorkRequest w = recvs_.pop();
    if (w.auto_mr != nullptr) ibv_dereg_mr(w.auto_mr);
  }
}

}  // namespace chorus::verbs
