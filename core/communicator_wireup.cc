// Wire-up: opens the transport context, opens the data endpoints to every
// data peer (core/data_peers.h) and channel and a notice endpoint to every
// ring neighbour and data peer (core/notice_relay.h), exchanges their
// address blobs through the bootstrap, connects them (the tagged
// point-to-point endpoints too; the data endpoints of a mesh's
// non-neighbours wait for first use, core/data_connect.cc), and sets up the
// registered staging buffers the algorithms use.

#include "core/communicator.h"
#include "core/communicator_internal.h"
#include "core/p2p_engine.h"

#include <chorus/chorus.h>

#include "core/auto_transport.h"
#include "core/log.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

namespace chorus::core {

namespace {

void put_u32(std::vector<std::byte>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(std::byte((v >> (8 * i)) & 0xff));
}

void put_bytes(std::vector<std::byte>& out, const void* p, size_t n) {
  put_u32(out, uint32_t(n));
  auto* b = static_cast<const std::byte*>(p);
  out.insert(out.end(), b, b + n);
}

/// Reads a length-prefixed field; false when the blob is too short.
bool get_bytes(const std::vector<std::byte>& in, size_t& pos, const std::byte*& p, size_t& n) {
  if (in.size() - pos < 4 || pos > in.size()) return false;
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(in[pos + size_t(i)]) << (8 * i);
  pos += 4;
  if (in.size() - pos < v) return false;
  p = in.data() + pos;
  n = v;
  pos += v;
  return true;
}

}  // namespace

Status Communicator::open_context() {
  // The composite transport gets its sub-transports' settings too (prefixed
  // with their names) and the plugin path to find them.
  std::vector<Setting> settings;
  if (cfg_.transport == kAutoTransportName) {
    settings = auto_transport_settings(cfg_);
  } else if (auto it = cfg_.transport_settings.find(cfg_.transport);
             it != cfg_.transport_settings.end()) {
    settings = it->second;
  }
  std::vector<chorus_kv_t> kv;
  for (const auto& s : settings) kv.push_back({s.key.c_str(), s.value.c_str(), s.origin.c_str()});
  chorus_tp_context_info_t info{};
  info.struct_size = sizeof(info);
  info.rank = rank_;
  info.size = size_;
  info.bind_address = cfg_.bind_address.c_str();
  info.config = kv.empty() ? nullptr : kv.data();
  info.config_count = kv.size();
  info.job_key = reinterpret_cast<const unsigned char*>(cfg_.transport_key.data());
  info.job_key_len = cfg_.transport_key.size();
  // Endpoints past the data channels are the notice endpoints (open_endpoints).
  info.data_channels = cfg_.channels;
  if (int rc = tp_->context_open(&info, &ctx_); rc != CHORUS_OK)
    return {rc, "rank " + std::to_string(rank_) + ": transport '" + cfg_.transport +
                    "' could not open a context: " + tp_->last_error()};
  caps_.struct_size = sizeof(caps_);
  if (int rc = tp_->get_caps(ctx_, &caps_); rc != CHORUS_OK)
    return {rc, "rank " + std::to_string(rank_) + ": get_caps failed: " + tp_->last_error()};
  if (caps_.max_message_size == 0) caps_.max_message_size = 1u << 30;
  // Copy only what the plugin's table has: an older minor's table is shorter,
  // and the ops it lacks stay NULL.
  std::memcpy(&proxy_, tp_, std::min(tp_->struct_size, sizeof(proxy_)));
  proxy_.struct_size = std::min(tp_->struct_size, sizeof(proxy_));
  proxy_.post_send = &Communicator::proxy_post_send;
  proxy_.post_recv = &Communicator::proxy_post_recv;
  proxy_.poll = &Communicator::proxy_poll;
  proxy_.read_error = &Communicator::proxy_read_error;
  // The immediates carry the core's call digests: algorithms get none.
  if (proxy_.struct_size >= offsetof(chorus_transport_plugin_v1_t, post_send_imm) + sizeof(void*))
    proxy_.post_send_imm = nullptr;
  pending_sends_.assign(size_t(size_), 0);
  pending_recvs_.assign(size_t(size_), 0);
  check_signatures_ = cfg_.check_signatures;
  p2p_send_seq_.assign(size_t(size_), 0);
  p2p_recv_seq_.assign(size_t(size_), 0);
  talked_.assign(size_t(size_), 0);
  touched_.assign(size_t(size_), 0);
  imm_peer_.assign(size_t(size_), 0);
  owed_[0].assign(size_t(size_), 0);
  owed_[1].assign(size_t(size_), 0);
  streams_.assign(size_t(size_), {});
  sig_sends_out_.assign(size_t(size_), 0);
  sig_send_next_.assign(size_t(size_), 0);
  peer_counters_ = std::make_unique<PeerCounters[]>(size_t(size_));
  for (int c = 0; c < CHORUS_COLL_COUNT; ++c)
    for (const Plugin* p : candidates_[c])
      algo_ops_.emplace_back(std::string(chorus_collective_name(c)) + "." + p->name(),
                             std::make_unique<std::atomic<uint64_t>>(0));
  return Status::ok();
}

Status Communicator::open_endpoints(std::vector<std::byte>& mine) {
  const int channels = cfg_.channels;
  endpoints_.assign(size_t(size_) * size_t(channels), nullptr);
  std::string fp = fingerprint();
  put_bytes(mine, fp.data(), fp.size());
  std::vector<std::byte> addr(caps_.max_address_size ? caps_.max_address_size : 1024);
  // Opens the endpoint to `p` on channel `c` (c == channels: the notice
  // endpoint) and appends its address blob; an empty blob stands for self.
  auto open_one = [&](int p, int c, chorus_tp_endpoint_t*& ep) -> Status {
    if (p == rank_) {
      put_u32(mine, 0);
      return Status::ok();
    }
    size_t len = addr.size();
    if (int rc = tp_->endpoint_open(ctx_, p, c, addr.data(), &len, &ep); rc != CHORUS_OK)
      return {rc, "rank " + std::to_string(rank_) + ": opening " +
                      (c == channels ? std::string("the notice endpoint") : "endpoint") +
                      " to rank " + std::to_string(p) +
                      (c == channels ? std::string() : " channel " + std::to_string(c)) +
                      " failed: " + tp_->last_error()};
    ++opened_[c == channels ? 1 : 0];
    put_bytes(mine, addr.data(), len);
    return Status::ok();
  };
  // Only toward the data peers: a peer no algorithm here posts to has no
  // data endpoint and no entry in the table (the peer computes the same).
  for (int p : data_peers_.of(rank_)) {
    for (int c = 0; c < channels; ++c) {
      auto& ep = endpoints_[size_t(p) * size_t(channels) + size_t(c)];
      if (auto st = open_one(p, c, ep); !st.is_ok()) return st;
      if (ep) endpoint_peer_[ep] = p;
    }
  }
  // The notice endpoints (channel index `channels`), after every data one:
  // to the ring neighbours and the data peers only (notice_links); notices
  // for the other ranks are relayed along the ring (core/peer_notices.cc).
  notice_eps_.assign(size_t(size_), nullptr);
  for (int p = 0; p < size_; ++p) {
    if (!notice_links(data_peers_, size_, rank_, p)) continue;
    auto& ep = notice_eps_[size_t(p)];
    if (auto st = open_one(p, channels, ep); !st.is_ok()) return st;
    if (ep) notice_peer_[ep] = p;
  }
  // Last, the host identity: v2 algorithms learn which ranks share a host.
  const std::string host = host_identity();
  put_bytes(mine, host.data(), host.size());
  // Then the tagged point-to-point endpoints (core/p2p_stream.cc).
  return open_p2p_endpoints(mine, addr);
}

Status Communicator::connect_endpoints(Deadline deadline) {
  std::vector<std::byte> mine;
  if (auto st = open_endpoints(mine); !st.is_ok()) return st;
  // Each table holds an address for every pair of ranks: O(N) bytes, O(N^2)
  // for all of them. Each is cut to this rank's part as it arrives.
  std::vector<std::vector<std::byte>> all;
  if (auto st = bootstrap_->all_gather_filtered(
          mine, all, deadline,
          [this](int owner, std::vector<std::byte>& table) { keep_own_entries(owner, table); });
      !st.is_ok())
    return st.with_context("rank " + std::to_string(rank_) + ": exchanging endpoint addresses");
  return connect_from(all, deadline);
}

void Communicator::keep_own_entries(int owner, std::vector<std::byte>& table) const {
  const size_t channels = size_t(cfg_.channels);
  const size_t n = size_t(size_);
  const size_t me = size_t(rank_);
  std::vector<std::byte> kept;
  size_t pos = 0;
  const auto next = [&](bool keep) {
    const std::byte* data = nullptr;
    size_t len = 0;
    if (!get_bytes(table, pos, data, len)) return false;
    if (keep) put_bytes(kept, data, len);
    return true;
  };
  if (!next(true)) {  // the fingerprint
    table.clear();
    return;
  }
  // A rank configured differently (say, another channel count) has a table
  // of another shape: keep its fingerprint alone, so that connect_from says
  // the configurations differ rather than that the table is malformed.
  const size_t fingerprint_end = kept.size();
  bool ok = true;
  for (int p : data_peers_.of(owner))  // data, toward owner's data peers only
    for (size_t c = 0; ok && c < channels; ++c) ok = next(size_t(p) == me);
  for (size_t q = 0; ok && q < n; ++q)  // notice, toward owner's notice peers only
    if (notice_links(data_peers_, size_, int(owner), int(q))) ok = next(q == me);
  ok = ok && next(true);  // host
  if (cfg_.p2p_tagged)
    for (size_t i = 0; ok && i < 2 * n; ++i) ok = next(i % n == me);  // p2p control, bulk
  if (!ok) kept.resize(fingerprint_end);
  table = std::move(kept);
}

Status Communicator::connect_from(const std::vector<std::vector<std::byte>>& all,
                                  Deadline deadline) {
  const int channels = cfg_.channels;
  const std::string fp = fingerprint();
  if (all.size() != size_t(size_))
    return {CHORUS_ERR_INTERNAL, "rank " + std::to_string(rank_) + ": address table has " +
                                     std::to_string(all.size()) + " entries for " +
                                     std::to_string(size_) + " ranks"};
  deferred_.assign(endpoints_.size(), {});
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    size_t pos = 0;
    const std::byte* data = nullptr;
    size_t n = 0;
    auto malformed =
        Status(CHORUS_ERR_INTERNAL, "rank " + std::to_string(rank_) +
                                        ": malformed address table from rank " + std::to_string(p));
    if (!get_bytes(all[size_t(p)], pos, data, n)) return malformed;
    std::string theirs(reinterpret_cast<const char*>(data), n);
    if (theirs != fp)
      return {CHORUS_ERR_INVALID_ARGUMENT,
              "rank " + std::to_string(rank_) + " and rank " + std::to_string(p) +
                  " disagree on the configuration (" + fp + " vs " + theirs +
                  "); give every rank the same config file and CHORUS_* variables"};
    for (int c = 0; c < channels && data_peers_.links(rank_, p); ++c) {
      if (!get_bytes(all[size_t(p)], pos, data, n)) return malformed;
      const size_t index = size_t(p) * size_t(channels) + size_t(c);
      // Connected at the first call that needs it (an empty blob, which no
      // transport sends, marks "nothing pending": that one connects now).
      if (n > 0 && defers_data(p)) {
        deferred_[index].assign(data, data + n);
        deferred_pending_ = true;
        continue;
      }
      int rc = tp_->endpoint_connect(endpoints_[index], data, n, blocking_connect_ms(deadline));
      if (rc != CHORUS_OK)
        return {rc, "rank " + std::to_string(rank_) + ": connecting to rank " + std::to_string(p) +
                        " (channel " + std::to_string(c) + ") over " + cfg_.transport +
                        " failed: " + tp_->last_error()};
      data_connected_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !kept_notice_entries(p)) continue;
    size_t pos = 0;
    const std::byte* data = nullptr;
    size_t n = 0;
    // Skip the fingerprint and the data endpoints' addresses.
    for (size_t i = 0; i < 1 + kept_data_entries(p); ++i)
      if (!get_bytes(all[size_t(p)], pos, data, n)) return malformed_table(p);
    if (!get_bytes(all[size_t(p)], pos, data, n)) return malformed_table(p);
    if (n > 0 && notice_eps_[size_t(p)] && defers_notice(p)) {
      // Connected when a call first needs the pair (core/notice_connect.cc).
      if (notice_idle_.empty()) {
        notice_idle_.resize(size_t(size_));
        notice_linked_.assign(size_t(size_), 0);
      }
      IdleNotice& idle = notice_idle_[size_t(p)];
      idle.ep = std::exchange(notice_eps_[size_t(p)], nullptr);
      idle.blob.assign(data, data + n);
      idle.lazy = true;
      // auto chooses the pair's sub-transport now and closes the other half.
      if (cfg_.transport == kAutoTransportName) auto_transport_plan(idle.ep, {data, n});
      continue;
    }
    int rc = tp_->endpoint_connect(notice_eps_[size_t(p)], data, n, blocking_connect_ms(deadline));
    if (rc != CHORUS_OK)
      return {rc, "rank " + std::to_string(rank_) + ": connecting to rank " + std::to_string(p) +
                      " (notice endpoint) over " + cfg_.transport +
                      " failed: " + tp_->last_error()};
    notice_connected_.fetch_add(1, std::memory_order_relaxed);
  }
  // Every rank's host identity, after its notice blob (if any): hosts are numbered
  // in the order of their first rank, the same on every rank.
  std::map<std::string, int> hosts;
  peer_host_.assign(size_t(size_), 0);
  for (int p = 0; p < size_; ++p) {
    size_t pos = 0;
    const std::byte* data = nullptr;
    size_t n = 0;
    for (size_t i = 0; i < 1 + kept_data_entries(p) + kept_notice_entries(p); ++i)
      if (!get_bytes(all[size_t(p)], pos, data, n)) return malformed_table(p);
    if (!get_bytes(all[size_t(p)], pos, data, n)) return malformed_table(p);
    const std::string id(reinterpret_cast<const char*>(data), n);
    peer_host_[size_t(p)] = hosts.emplace(id, int(hosts.size())).first->second;
    if (auto st = connect_p2p(p, all[size_t(p)], pos, deadline); !st.is_ok()) return st;
  }
  if (p2p_)
    if (auto st = p2p_->arm(); !st.is_ok()) return st;
  host_count_ = int(hosts.size());
  if (cfg_.transport == kAutoTransportName) {
    auto peers = auto_transport_peers(ctx_);
    for (const auto& [name, ranks] : peers) auto_peer_counts_.emplace_back(name, ranks.size());
    log(CHORUS_LOG_INFO, "auto: " + auto_transport_summary(peers));
  }
  // Which peers' data carries the call digests: both sides of a pair use the
  // same transport, so they decide alike.
  imm_peer_.assign(size_t(size_), 0);
  if (cfg_.transport == kAutoTransportName) {
    imm_peer_ = auto_transport_peer_imm(ctx_, size_);
  } else if ((caps_.flags & CHORUS_TP_CAP_IMM_DATA) &&
             tp_->struct_size >=
                 offsetof(chorus_transport_plugin_v1_t, post_send_imm) + sizeof(void*) &&
             tp_->post_send_imm) {
    for (int p = 0; p < size_; ++p) imm_peer_[size_t(p)] = p != rank_;
  }
  imm_any_ = std::find(imm_peer_.begin(), imm_peer_.end(), 1) != imm_peer_.end();
  return arm_notices();
}

Status Communicator::open_p2p_endpoints(std::vector<std::byte>& mine,
                                        std::vector<std::byte>& addr) {
  if (!cfg_.p2p_tagged) return Status::ok();
  make_p2p_engine();
  // Channel indices past the notice endpoint: control, then bulk.
  for (int k = 0; k < 2; ++k) {
    auto& eps = p2p_->endpoints(k);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) {
        put_u32(mine, 0);
        continue;
      }
      size_t len = addr.size();
      const int channel = cfg_.channels + 1 + k;
      if (int rc = tp_->endpoint_open(ctx_, p, channel, addr.data(), &len, &eps[size_t(p)]);
          rc != CHORUS_OK)
        return {rc, "rank " + std::to_string(rank_) + ": opening the point-to-point " +
                        (k == 0 ? "control" : "data") + " endpoint to rank " + std::to_string(p) +
                        " failed: " + tp_->last_error()};
      ++opened_[2];
      put_bytes(mine, addr.data(), len);
    }
  }
  return Status::ok();
}

Status Communicator::connect_p2p(int p, const std::vector<std::byte>& table, size_t& pos,
                                 Deadline deadline) {
  if (!p2p_) return Status::ok();
  for (int k = 0; k < 2; ++k) {
    const std::byte* data = nullptr;
    size_t n = 0;
    if (!get_bytes(table, pos, data, n)) return malformed_table(p);
    if (p == rank_) continue;
    if (p2p_lazy()) {
      // Connected when an operation (or the peer) first needs the pair.
      p2p_->defer_connect(p, k, data, n);
      // auto tells which sub-transport it will use for p from the address:
      // the init summary and the algorithms' peer table name it already.
      if (cfg_.transport == kAutoTransportName)
        auto_transport_plan(p2p_->endpoints(k)[size_t(p)], {data, n});
      continue;
    }
    int rc = tp_->endpoint_connect(p2p_->endpoints(k)[size_t(p)], data, n,
                                   blocking_connect_ms(deadline));
    if (rc != CHORUS_OK)
      return {rc, "rank " + std::to_string(rank_) + ": connecting to rank " + std::to_string(p) +
                      " (point-to-point " + (k == 0 ? "control" : "data") + " endpoint) over " +
                      cfg_.transport + " failed: " + tp_->last_error()};
  }
  return Status::ok();
}

Status Communicator::malformed_table(int peer) const {
  return {CHORUS_ERR_INTERNAL, "rank " + std::to_string(rank_) +
                                   ": malformed address table from rank " + std::to_string(peer)};
}

Status Communicator::setup_staging() {
  size_t slots = size_t(cfg_.staging_slots);
  size_t bytes = slots * cfg_.staging_slot_size;
  staging_block_ = std::aligned_alloc(4096, bytes);
  if (!staging_block_)
    return {CHORUS_ERR_SYSTEM, "cannot allocate " + std::to_string(bytes) + " bytes of staging"};
  std::memset(staging_block_, 0, bytes);
  for (size_t i = 0; i < slots; ++i) {
    void* p = static_cast<std::byte*>(staging_block_) + i * cfg_.staging_slot_size;
    chorus_tp_mr_t* mr = nullptr;
    if (int rc = tp_->mem_register(ctx_, p, cfg_.staging_slot_size, CHORUS_MEM_HOST, &mr);
        rc != CHORUS_OK)
      return {rc, "rank " + std::to_string(rank_) +
                      ": registering staging buffers failed: " + tp_->last_error()};
    staging_.push_back(p);
    staging_mr_.push_back(mr);
  }
  return Status::ok();
}

}  // namespace chorus::core
