#include "core/communicator.h"

#include <chorus/chorus.h>

#include "core/auto_transport.h"
#include "core/job_identity.h"
#include "core/limits.h"
#include "core/log.h"
#include "core/reduce.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <sstream>

namespace chorus::core {
namespace {

constexpr const char* kBuiltinAlgorithms[] = {"ring", "mesh"};

/// The communicator whose call is running on this thread (algorithms call the
/// proxy transport ops from the thread that called the collective).
thread_local Communicator* t_running = nullptr;

/// A configured timeout as milliseconds for Deadline::after: saturating (a
/// timeout too large to represent becomes milliseconds::max(), which
/// Deadline::after turns into "no deadline") and at least 1 ms when positive.
std::chrono::milliseconds seconds_ms(double s) {
  return timeout_ms_from_seconds(s).value_or(std::chrono::milliseconds::max());
}

void put_u32(std::vector<std::byte>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(std::byte((v >> (8 * i)) & 0xff));
}

void put_bytes(std::vector<std::byte>& out, const void* p, size_t n) {
  put_u32(out, uint32_t(n));
  auto* b = static_cast<const std::byte*>(p);
  out.insert(out.end(), b, b + n);
}

/// Reads a length-prefixed field; false when the blob is too short.
std::string format_seconds(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

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

std::string dtype_list() {
  std::string s;
  for (int d = 0; d < CHORUS_DTYPE_COUNT; ++d)
    s += (d ? ", " : "") + std::string(chorus_dtype_name(d));
  return s;
}

Status check_dtype(int dtype) {
  if (chorus_dtype_size(dtype) == 0)
    return {CHORUS_ERR_INVALID_ARGUMENT,
            "unknown dtype " + std::to_string(dtype) + " (valid: " + dtype_list() + ")"};
  return Status::ok();
}

/// Validates a buffer of `count` * `blocks` elements of `dtype`: its byte
/// size must not exceed kMaxBufferBytes (so no later count, chunk or offset
/// arithmetic can wrap) and it must not run past the end of the address space.
Status check_buffer(const void* p, size_t count, size_t blocks, int dtype, const char* name) {
  if (auto st = check_dtype(dtype); !st.is_ok()) return st;
  const size_t esize = chorus_dtype_size(dtype);
  const auto bytes = buffer_bytes(count, blocks, esize);
  if (!bytes) {
    std::string size = "count " + std::to_string(count) + " of " + chorus_dtype_name(dtype) + " (" +
                       std::to_string(esize) + " bytes each)";
    if (blocks > 1) size += " times " + std::to_string(blocks) + " ranks";
    return {CHORUS_ERR_INVALID_ARGUMENT,
            std::string(name) + ": " + size + " overflows the largest buffer Chorus accepts, " +
                std::to_string(kMaxBufferBytes) +
                " bytes (PTRDIFF_MAX); split the operation into smaller calls"};
  }
  if (count > 0 && p == nullptr)
    return {CHORUS_ERR_INVALID_ARGUMENT,
            std::string(name) + " is NULL with count " + std::to_string(count)};
  if (range_wraps(reinterpret_cast<uintptr_t>(p), *bytes)) {
    std::ostringstream os;
    os << name << " at " << p << " with " << *bytes
       << " bytes runs past the end of the address space; count or pointer is wrong";
    return {CHORUS_ERR_INVALID_ARGUMENT, os.str()};
  }
  return Status::ok();
}

/// INVALID_ARGUMENT when `in` and `out` share bytes; `allowed` describes the
/// only overlapping form the collective accepts (empty: none).
Status check_disjoint(const char* what, const void* in, uint64_t in_bytes, const void* out,
                      uint64_t out_bytes, const std::string& allowed) {
  if (!ranges_overlap(reinterpret_cast<uintptr_t>(in), in_bytes, reinterpret_cast<uintptr_t>(out),
                      out_bytes))
    return Status::ok();
  std::ostringstream os;
  os << what << ": input [" << in << ", +" << in_bytes << " bytes) and output [" << out << ", +"
     << out_bytes << " bytes) partly overlap; "
     << (allowed.empty() ? std::string("the buffers must be disjoint")
                         : "the only overlap allowed is " + allowed + ", else disjoint buffers")
     << " (docs/architecture.md, Buffers and aliasing)";
  return {CHORUS_ERR_INVALID_ARGUMENT, os.str()};
}

Status check_op(int dtype, int op) {
  if (reduce_kernel(dtype, op)) return Status::ok();
  std::string reason = reduce_unsupported_reason(dtype, op);
  return {CHORUS_ERR_INVALID_ARGUMENT, reason.empty() ? "unsupported dtype/op pair" : reason};
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::create(
    Config config, std::unique_ptr<SideChannel> host_channel) {
  std::unique_ptr<Communicator> comm(new Communicator());
  if (auto st = comm->init(std::move(config), std::move(host_channel)); !st.is_ok()) return st;
  return comm;
}

Status Communicator::init(Config config, std::unique_ptr<SideChannel> host_channel) {
  cfg_ = std::move(config);
  log_set_level(cfg_.log_level);
  static std::atomic<int> world_count{0};
  id_ = "w" + std::to_string(world_count.fetch_add(1));
  LogCommScope log_scope(&id_);  // transport lines logged during init name this communicator
  Deadline deadline = Deadline::after(seconds_ms(cfg_.timeout_init_s));

  if (cfg_.world_size < 0 && cfg_.rank < 0) {
    cfg_.world_size = 1;  // a program started on its own is a job of one
    cfg_.rank = 0;
  }
  if (cfg_.world_size < 0)
    return {
        CHORUS_ERR_INVALID_ARGUMENT,
        "rank " + std::to_string(cfg_.rank) +
            " is set but the world size is not; set CHORUS_WORLD_SIZE (or bootstrap.world_size, "
            "or run under chorusrun)"};
  if (cfg_.rank < 0)
    return {CHORUS_ERR_INVALID_ARGUMENT,
            "world size " + std::to_string(cfg_.world_size) +
                " is set but this process's rank is not; set CHORUS_RANK (or bootstrap.rank)"};
  if (cfg_.rank >= cfg_.world_size)
    return {CHORUS_ERR_INVALID_ARGUMENT, "rank " + std::to_string(cfg_.rank) +
                                             " is out of range for world size " +
                                             std::to_string(cfg_.world_size)};
  rank_ = cfg_.rank;
  size_ = cfg_.world_size;
  log_set_rank(rank_);
  if (size_ > 1 && cfg_.coordinator.empty() && !host_channel)
    return {CHORUS_ERR_INVALID_ARGUMENT,
            "rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                ": no coordinator address; set CHORUS_COORDINATOR=host:port (the same on every "
                "rank) or launch with chorusrun"};

  auto tp = load_transport();
  if (!tp.is_ok()) return tp.status().with_context("rank " + std::to_string(rank_));
  transport_ = *tp;
  tp_ = transport_->transport();
  if (auto st = select_algorithms(); !st.is_ok()) return st;

  if (host_channel) {
    bootstrap_ = std::move(host_channel);
    CHORUS_LOGF(CHORUS_LOG_DEBUG, rank_, "bootstrap through the host's callbacks");
  } else {
    BootstrapOptions bo;
    bo.rank = rank_;
    bo.size = size_;
    bo.coordinator = cfg_.coordinator;
    bo.job_token = cfg_.job_token;
    // A token names the job already; without one, the launcher's job id
    // keeps ranks of two launched jobs apart (docs/reliability.md).
    if (cfg_.job_token.empty()) bo.job_identity = job_identity(environment_map());
    bo.log = [rank = rank_](int level, const std::string& msg) {
      if (log_enabled(level)) log_line(level, rank, "bootstrap: " + msg);
    };
    auto boot = Bootstrap::connect(bo, deadline);
    if (!boot.is_ok()) return boot.status();
    bootstrap_ = std::make_unique<BootstrapSideChannel>(std::move(*boot));
    CHORUS_LOGF(CHORUS_LOG_DEBUG, rank_,
                "bootstrap joined: " << size_ << " ranks via " << cfg_.coordinator);
  }

  // Authenticates the transport's data connections (docs/reliability.md);
  // split children inherit it with cfg_.
  auto job_key = agree_transport_key(*bootstrap_, rank_, cfg_.job_token, deadline);
  if (!job_key.is_ok()) return job_key.status();
  cfg_.transport_key = std::move(*job_key);
  if (auto st = open_context(); !st.is_ok()) return st;
  if (auto st = connect_endpoints(deadline); !st.is_ok()) return st;
  if (auto st = setup_staging(); !st.is_ok()) return st;
  if (auto st = bootstrap_->barrier(deadline); !st.is_ok())
    return st.with_context("rank " + std::to_string(rank_) + ": init barrier");
  CHORUS_LOGF(CHORUS_LOG_INFO, rank_,
              "comm " << id_ << ": communicator ready: " << size_ << " ranks, transport "
                      << cfg_.transport << ", " << cfg_.channels << " channel(s), config "
                      << cfg_.source);
  return Status::ok();
}

Result<std::shared_ptr<Plugin>> Communicator::load_transport() const {
  if (cfg_.transport == kAutoTransportName) return auto_transport_plugin();
  return load_plugin(PluginKind::kTransport, cfg_.transport, plugin_search_path(cfg_.plugin_path));
}

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
  pending_sends_.assign(size_t(size_), 0);
  pending_recvs_.assign(size_t(size_), 0);
  check_signatures_ = cfg_.check_signatures;
  p2p_send_seq_.assign(size_t(size_), 0);
  p2p_recv_seq_.assign(size_t(size_), 0);
  talked_.assign(size_t(size_), 0);
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

Status Communicator::select_algorithms() {
  auto search = plugin_search_path(cfg_.plugin_path);
  std::set<std::string> pinned;
  bool any_auto = false;
  for (const auto& name : cfg_.algorithm) {
    if (name == "auto")
      any_auto = true;
    else
      pinned.insert(name);
  }
  auto add = [&](const std::string& name, bool required) -> Status {
    for (const auto& p : algorithms_)
      if (p->name() == name) return Status::ok();
    auto loaded = load_plugin(PluginKind::kAlgorithm, name, search);
    if (!loaded.is_ok()) {
      if (required) return loaded.status().with_context("rank " + std::to_string(rank_));
      CHORUS_LOGF(
          CHORUS_LOG_DEBUG, rank_,
          "built-in algorithm '" << name << "' not available: " << loaded.status().message());
      return Status::ok();
    }
    algorithms_.push_back(*loaded);
    std::vector<chorus_kv_t> kv;
    if (auto it = cfg_.algorithm_settings.find(name); it != cfg_.algorithm_settings.end())
      for (const auto& s : it->second)
        kv.push_back({s.key.c_str(), s.value.c_str(), s.origin.c_str()});
    algorithm_kv_.push_back(std::move(kv));
    return Status::ok();
  };
  for (const auto& name : pinned)
    if (auto st = add(name, true); !st.is_ok()) return st;
  if (any_auto)
    for (const char* name : kBuiltinAlgorithms)
      if (auto st = add(name, false); !st.is_ok()) return st;

  // The op's slot is read only when the table is long enough to hold it: a
  // plugin built against an older minor ends before the newer entries.
  auto implements = [](const chorus_algorithm_plugin_v1_t* a, int coll) {
    using T = chorus_algorithm_plugin_v1_t;
    size_t off = 0;
    switch (coll) {
      case CHORUS_COLL_ALL_REDUCE:
        off = offsetof(T, all_reduce);
        break;
      case CHORUS_COLL_ALL_GATHER:
        off = offsetof(T, all_gather);
        break;
      case CHORUS_COLL_REDUCE_SCATTER:
        off = offsetof(T, reduce_scatter);
        break;
      case CHORUS_COLL_BROADCAST:
        off = offsetof(T, broadcast);
        break;
      case CHORUS_COLL_REDUCE:
        off = offsetof(T, reduce);
        break;
      case CHORUS_COLL_GATHER:
        off = offsetof(T, gather);
        break;
      case CHORUS_COLL_SCATTER:
        off = offsetof(T, scatter);
        break;
      case CHORUS_COLL_ALL_TO_ALL:
        off = offsetof(T, all_to_all);
        break;
      case CHORUS_COLL_ALL_TO_ALLV:
        off = offsetof(T, all_to_allv);
        break;
      default:
        off = offsetof(T, barrier);
        break;
    }
    if (a->struct_size < off + sizeof(void*)) return false;
    void* op = nullptr;
    std::memcpy(&op, reinterpret_cast<const char*>(a) + off, sizeof(op));
    return op != nullptr;
  };
  for (int coll = 0; coll < CHORUS_COLL_COUNT; ++coll) {
    const std::string& want = cfg_.algorithm[coll];
    std::string key = std::string("algorithm.") + chorus_collective_name(coll);
    for (size_t i = 0; i < algorithms_.size(); ++i) {
      const Plugin& p = *algorithms_[i];
      if (want != "auto" && p.name() != want) continue;
      constexpr uint32_t kReproducible =
          CHORUS_ALGO_DETERMINISTIC_ACROSS_RANKS | CHORUS_ALGO_DETERMINISTIC_ACROSS_RUNS;
      if (want == "auto" && cfg_.deterministic &&
          (p.algorithm()->flags & kReproducible) != kReproducible)
        continue;
      if (implements(p.algorithm(), coll)) {
        candidates_[coll].push_back(&p);
      } else if (want != "auto") {
        auto origin = cfg_.origins.find(key);
        return {CHORUS_ERR_INVALID_ARGUMENT,
                "algorithm '" + want + "' (" + key + ", set by " +
                    (origin != cfg_.origins.end() ? origin->second : "?") +
                    ") does not implement " + chorus_collective_name(coll) +
                    "; choose another algorithm or \"auto\""};
      }
    }
    if (candidates_[coll].empty())
      return {CHORUS_ERR_UNAVAILABLE, std::string("no algorithm available for ") +
                                          chorus_collective_name(coll) +
                                          "; the built-in ring plugin was not found next to "
                                          "libchorus (run chorus-info)"};
  }
  return Status::ok();
}

const chorus_algorithm_plugin_v1_t* Communicator::choose(int collective, uint64_t bytes) const {
  if (collective < 0 || collective >= CHORUS_COLL_COUNT) return nullptr;
  const auto& list = candidates_[collective];
  if (list.empty()) return nullptr;
  if (list.size() == 1) return list.front()->algorithm();
  // With algorithm.switch_bytes set, the plugins' preferences only decide which
  // candidate is the latency one (best for 1 byte) and which the bandwidth one
  // (best for 1 GiB); the configured size picks between those two.
  uint64_t probe = bytes;
  if (cfg_.switch_bytes > 0) probe = bytes < cfg_.switch_bytes ? 1 : (1ull << 30);
  const chorus_algorithm_plugin_v1_t* best = list.front()->algorithm();
  int best_score = std::numeric_limits<int>::min();
  for (const Plugin* p : list) {
    const auto* a = p->algorithm();
    bool has_pref =
        a->struct_size >= offsetof(chorus_algorithm_plugin_v1_t, preference) + sizeof(void*) &&
        a->preference != nullptr;
    int score = has_pref ? a->preference(collective, size_, probe) : 0;
    if (score < 0) continue;
    if (score > best_score) {
      best_score = score;
      best = a;
    }
  }
  return best;
}

std::string Communicator::fingerprint() const {
  // Every rank must agree on what shapes the wire traffic; a mismatch would
  // otherwise show up as a hang or garbage much later.
  std::string transport = cfg_.transport;
  if (transport == kAutoTransportName) {
    auto [local, fabric] = auto_transport_names(cfg_);
    transport += "(local=" + local + ",fabric=" + fabric + ")";
  }
  std::string f = "transport=" + transport + " channels=" + std::to_string(cfg_.channels) +
                  " staging_slot_size=" + std::to_string(cfg_.staging_slot_size) +
                  " staging_slots=" + std::to_string(cfg_.staging_slots) +
                  " deterministic=" + std::to_string(cfg_.deterministic) +
                  " switch_bytes=" + std::to_string(cfg_.switch_bytes) +
                  " check_signatures=" + std::to_string(cfg_.check_signatures);
  for (int c = 0; c < CHORUS_COLL_COUNT; ++c) {
    f += std::string(" ") + chorus_collective_name(c) + "=" + cfg_.algorithm[c];
    for (const Plugin* p : candidates_[c])
      f += (p == candidates_[c].front() ? ":" : ",") + p->name();
  }
  return f;
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
    put_bytes(mine, addr.data(), len);
    return Status::ok();
  };
  for (int p = 0; p < size_; ++p) {
    for (int c = 0; c < channels; ++c) {
      auto& ep = endpoints_[size_t(p) * size_t(channels) + size_t(c)];
      if (auto st = open_one(p, c, ep); !st.is_ok()) return st;
      if (ep) endpoint_peer_[ep] = p;
    }
  }
  // The notice endpoints (channel index `channels`), after every data one.
  notice_eps_.assign(size_t(size_), nullptr);
  for (int p = 0; p < size_; ++p) {
    auto& ep = notice_eps_[size_t(p)];
    if (auto st = open_one(p, channels, ep); !st.is_ok()) return st;
    if (ep) notice_peer_[ep] = p;
  }
  return Status::ok();
}

Status Communicator::connect_endpoints(Deadline deadline) {
  std::vector<std::byte> mine;
  if (auto st = open_endpoints(mine); !st.is_ok()) return st;
  std::vector<std::vector<std::byte>> all;
  if (auto st = bootstrap_->all_gather(mine, all, deadline); !st.is_ok())
    return st.with_context("rank " + std::to_string(rank_) + ": exchanging endpoint addresses");
  return connect_from(all, deadline);
}

Status Communicator::connect_from(const std::vector<std::vector<std::byte>>& all,
                                  Deadline deadline) {
  const int channels = cfg_.channels;
  const std::string fp = fingerprint();
  if (all.size() != size_t(size_))
    return {CHORUS_ERR_INTERNAL, "rank " + std::to_string(rank_) + ": address table has " +
                                     std::to_string(all.size()) + " entries for " +
                                     std::to_string(size_) + " ranks"};
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
    for (int q = 0; q < size_; ++q) {
      for (int c = 0; c < channels; ++c) {
        if (!get_bytes(all[size_t(p)], pos, data, n)) return malformed;
        if (q != rank_) continue;
        auto* ep = endpoints_[size_t(p) * size_t(channels) + size_t(c)];
        int rc = tp_->endpoint_connect(ep, data, n, deadline.remaining_ms());
        if (rc != CHORUS_OK)
          return {rc, "rank " + std::to_string(rank_) + ": connecting to rank " +
                          std::to_string(p) + " (channel " + std::to_string(c) + ") over " +
                          cfg_.transport + " failed: " + tp_->last_error()};
      }
    }
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    size_t pos = 0;
    const std::byte* data = nullptr;
    size_t n = 0;
    // Skip the fingerprint and every data endpoint's blob.
    for (size_t i = 0; i < 1 + size_t(size_) * size_t(channels); ++i)
      if (!get_bytes(all[size_t(p)], pos, data, n)) return malformed_table(p);
    for (int q = 0; q < size_; ++q) {
      if (!get_bytes(all[size_t(p)], pos, data, n)) return malformed_table(p);
      if (q != rank_) continue;
      int rc = tp_->endpoint_connect(notice_eps_[size_t(p)], data, n, deadline.remaining_ms());
      if (rc != CHORUS_OK)
        return {rc, "rank " + std::to_string(rank_) + ": connecting to rank " + std::to_string(p) +
                        " (notice endpoint) over " + cfg_.transport +
                        " failed: " + tp_->last_error()};
    }
  }
  if (cfg_.transport == kAutoTransportName) {
    auto peers = auto_transport_peers(ctx_);
    for (const auto& [name, ranks] : peers) auto_peer_counts_.emplace_back(name, ranks.size());
    log(CHORUS_LOG_INFO, "auto: " + auto_transport_summary(peers));
  }
  return arm_notices();
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

Communicator::~Communicator() {
  {
    std::unique_lock lock(q_mu_);
    stopping_ = true;
    if (busy_ || !queue_.empty()) {
      lock.unlock();
      log(CHORUS_LOG_WARN, "finalized with requests pending; aborting them");
      finalizing_.store(true);
      abort();
      lock.lock();
    }
  }
  q_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  {
    // Without a worker (never started), fail what is left here.
    std::lock_guard lock(q_mu_);
    for (auto& r : queue_)
      r->finish({CHORUS_ERR_ABORTED, "rank " + std::to_string(rank_) + ": " + r->what() +
                                         ": the communicator was finalized before it ran"});
    queue_.clear();
  }
  if (tp_ && ctx_) {
    if (!broken_ && !aborted_.load()) say_goodbye();
    for (auto*& ep : endpoints_)
      if (ep) tp_->endpoint_close(ep), ep = nullptr;
    for (auto*& ep : notice_eps_)
      if (ep) tp_->endpoint_close(ep), ep = nullptr;
    if (notice_mr_) tp_->mem_deregister(ctx_, notice_mr_);
    release_call_registrations();
    for (auto* mr : staging_mr_)
      if (mr) tp_->mem_deregister(ctx_, mr);
    tp_->context_close(ctx_);
    ctx_ = nullptr;
  }
  std::free(staging_block_);
  std::free(notice_block_);
}

void Communicator::abort() {
  aborted_.store(true);
  if (tp_ && ctx_ &&
      tp_->struct_size >= offsetof(chorus_transport_plugin_v1_t, interrupt) + sizeof(void*) &&
      tp_->interrupt)
    tp_->interrupt(ctx_);
}

Status Communicator::usable(const char* what) const {
  // On every call's path: build no text unless there is an error to report.
  if (aborted_.load())
    return {
        CHORUS_ERR_ABORTED,
        who() + ": " + what + ": the communicator was aborted; finalize it and create a new one"};
  if (broken_)
    return {broken_status_.code(),
            who() + ": " + what + ": the communicator failed earlier and cannot be used (" +
                broken_status_.message() + "); finalize it and create a new one"};
  return Status::ok();
}

void Communicator::mark_broken(const Status& why) {
  // Not counted in `errors` here: the operation that failed is, once, where
  // it finishes (run_request).
  broken_ = true;
  broken_status_ = why;
  if (why.code() == CHORUS_ERR_PEER_LOST && lost_rank_ >= 0) send_notices();
  // Outstanding receives may point into caller memory; closing the endpoints
  // guarantees nothing lands there after the call returns.
  for (auto*& ep : endpoints_)
    if (ep) tp_->endpoint_close(ep), ep = nullptr;
}

void Communicator::release_call_registrations() {
  for (auto* mr : call_mrs_)
    if (mr) tp_->mem_deregister(ctx_, mr);
  call_mrs_.clear();
}

template <class Call>
Status Communicator::run(int collective, const char* what, uint64_t bytes, CallSig sig,
                         Call&& call) {
  if (auto st = usable(what); !st.is_ok()) return st;
  const chorus_algorithm_plugin_v1_t* algo = choose(collective, bytes);
  size_t index = 0;
  while (index < algorithms_.size() && algorithms_[index]->algorithm() != algo) ++index;
  if (!algo || index == algorithms_.size())
    return {CHORUS_ERR_INTERNAL, std::string("no algorithm chosen for ") + what};
  call_deadline_ = Deadline::after(seconds_ms(cfg_.timeout_collective_s));
  call_what_ = what;
  call_error_ = Status::ok();
  post_lost_peer_ = -1;
  std::fill(pending_sends_.begin(), pending_sends_.end(), 0);
  std::fill(pending_recvs_.begin(), pending_recvs_.end(), 0);
  struct Running {
    explicit Running(Communicator* c) : self(c), log_scope(&c->id_) { t_running = c; }
    ~Running() {
      t_running = nullptr;
      self->call_sig_active_ = false;
    }
    Communicator* self;
    LogCommScope log_scope;
  } running(this);
  if (auto st = mismatch_pending(); !st.is_ok()) return st;
  sig.call = collective;
  sig.seq = collective_seq_++;
  std::strncpy(sig.algo, algo->name, sizeof(sig.algo) - 1);
  // The root of a broadcast depends on no other rank: it learns of a
  // disagreement only if every rank sends it its signature.
  begin_signature(sig, collective == CHORUS_COLL_BROADCAST);

  chorus_algo_env_v1_t env{};
  env.struct_size = sizeof(env);
  env.minor = CHORUS_ALGORITHM_ABI_MINOR;
  env.rank = rank_;
  env.size = size_;
  env.channels = cfg_.channels;
  env.tp = &proxy_;
  env.tp_ctx = ctx_;
  env.caps = &caps_;
  env.staging_slots = staging_.size();
  env.staging_slot_size = cfg_.staging_slot_size;
  env.staging = staging_.data();
  env.staging_mr = staging_mr_.data();
  env.config = algorithm_kv_[index].empty() ? nullptr : algorithm_kv_[index].data();
  env.config_count = algorithm_kv_[index].size();
  env.core = this;
  env.endpoint = &Communicator::env_endpoint;
  env.reduce_kernel = &reduce_kernel;
  env.mem_register = &Communicator::env_mem_register;
  env.progress = &Communicator::env_progress;
  env.fail = &Communicator::env_fail;
  env.log = &Communicator::env_log;

  if (auto* counter = algo_counter(collective, algo->name))
    counter->fetch_add(1, std::memory_order_relaxed);
  if (log_enabled(CHORUS_LOG_DEBUG))
    log(CHORUS_LOG_DEBUG, std::string(what) + ": " + std::to_string(bytes) +
                              " bytes via algorithm '" + algo->name + "'");
  int rc = call(algo, &env);
  if (rc == CHORUS_OK && call_sig_active_) {
    // An algorithm that posted nothing (count 0) still owes every peer its
    // signature, or a rank that skipped the call would not be noticed.
    if (std::find(talked_.begin(), talked_.end(), 1) == talked_.end())
      for (int p = 0; p < size_; ++p)
        if (p != rank_) send_signature(p);
    rc = await_signatures();
  }
  release_call_registrations();
  if (rc == CHORUS_OK) return Status::ok();
  Status st = call_error_.is_ok()
                  ? Status(rc, "rank " + std::to_string(rank_) + ": " + what + ": algorithm '" +
                                   algo->name + "' failed with " + chorus_status_name(rc))
                  : call_error_;
  st = settle_failure(std::move(st));
  if (st.code() != CHORUS_ERR_INVALID_ARGUMENT) mark_broken(st);
  log(CHORUS_LOG_DEBUG, st.message());
  return st;
}

Status Communicator::all_reduce(const void* in, void* out, size_t count, int dtype, int op) {
  if (auto st = check_buffer(in, count, 1, dtype, "input"); !st.is_ok()) return st;
  if (auto st = check_buffer(out, count, 1, dtype, "output"); !st.is_ok()) return st;
  if (auto st = check_op(dtype, op); !st.is_ok()) return st;
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  CallSig sig;
  sig.count = count, sig.dtype = dtype, sig.op = op;
  return run(CHORUS_COLL_ALL_REDUCE, "all_reduce", bytes, sig,
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->all_reduce(env, in, out, count, dtype, op);
             });
}

Status Communicator::all_gather(const void* in, void* out, size_t count, int dtype) {
  if (auto st = check_buffer(in, count, 1, dtype, "input"); !st.is_ok()) return st;
  if (auto st = check_buffer(out, count, size_t(size_), dtype, "output"); !st.is_ok()) return st;
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  CallSig sig;
  sig.count = count, sig.dtype = dtype;
  return run(CHORUS_COLL_ALL_GATHER, "all_gather", bytes, sig,
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->all_gather(env, in, out, count, dtype);
             });
}

Status Communicator::reduce_scatter(const void* in, void* out, size_t count, int dtype, int op) {
  if (auto st = check_buffer(in, count, size_t(size_), dtype, "input"); !st.is_ok()) return st;
  if (auto st = check_buffer(out, count, 1, dtype, "output"); !st.is_ok()) return st;
  if (auto st = check_op(dtype, op); !st.is_ok()) return st;
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  CallSig sig;
  sig.count = count, sig.dtype = dtype, sig.op = op;
  return run(CHORUS_COLL_REDUCE_SCATTER, "reduce_scatter", bytes, sig,
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->reduce_scatter(env, in, out, count, dtype, op);
             });
}

Status Communicator::broadcast(void* buf, size_t count, int dtype, int root) {
  if (auto st = check_buffer(buf, count, 1, dtype, "buffer"); !st.is_ok()) return st;
  if (root < 0 || root >= size_)
    return {CHORUS_ERR_INVALID_ARGUMENT, "broadcast root " + std::to_string(root) +
                                             " is out of range for " + std::to_string(size_) +
                                             " ranks"};
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  CallSig sig;
  sig.count = count, sig.dtype = dtype, sig.root = root;
  return run(CHORUS_COLL_BROADCAST, "broadcast", bytes, sig,
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->broadcast(env, buf, count, dtype, root);
             });
}

Status Communicator::barrier() {
  return run(CHORUS_COLL_BARRIER, "barrier", 0, CallSig{},
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->barrier(env);
             });
}

// Rooted collectives and all_to_all(v): the same run() as the others. The
// size handed to the algorithm choice must be the same on every rank, or
// ranks could pick different algorithms: all_to_allv's sizes differ per rank,
// so it is chosen by rank count alone (bytes 0).

Status Communicator::reduce(const void* in, void* out, size_t count, int dtype, int op, int root) {
  if (auto st = check_reduce(in, out, count, dtype, op, root); !st.is_ok()) return st;
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  CallSig sig;
  sig.count = count, sig.dtype = dtype, sig.op = op, sig.root = root;
  return run(CHORUS_COLL_REDUCE, "reduce", bytes, sig,
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->reduce(env, in, out, count, dtype, op, root);
             });
}

Status Communicator::gather(const void* in, void* out, size_t count, int dtype, int root) {
  if (auto st = check_gather(in, out, count, dtype, root); !st.is_ok()) return st;
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  CallSig sig;
  sig.count = count, sig.dtype = dtype, sig.root = root;
  return run(CHORUS_COLL_GATHER, "gather", bytes, sig,
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->gather(env, in, out, count, dtype, root);
             });
}

Status Communicator::scatter(const void* in, void* out, size_t count, int dtype, int root) {
  if (auto st = check_scatter(in, out, count, dtype, root); !st.is_ok()) return st;
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  CallSig sig;
  sig.count = count, sig.dtype = dtype, sig.root = root;
  return run(CHORUS_COLL_SCATTER, "scatter", bytes, sig,
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->scatter(env, in, out, count, dtype, root);
             });
}

Status Communicator::all_to_all(const void* in, void* out, size_t count, int dtype) {
  if (auto st = check_all_to_all(in, out, count, dtype); !st.is_ok()) return st;
  uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype) * uint64_t(size_);
  CallSig sig;
  sig.count = count, sig.dtype = dtype;
  return run(CHORUS_COLL_ALL_TO_ALL, "all_to_all", bytes, sig,
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->all_to_all(env, in, out, count, dtype);
             });
}

Status Communicator::all_to_allv(const void* in, const size_t* send_counts,
                                 const size_t* send_offsets, void* out, const size_t* recv_counts,
                                 const size_t* recv_offsets, int dtype) {
  if (auto st =
          check_all_to_allv(in, send_counts, send_offsets, out, recv_counts, recv_offsets, dtype);
      !st.is_ok())
    return st;
  // The per-peer counts differ between ranks by design: the signature
  // carries the dtype only (count 0).
  CallSig sig;
  sig.dtype = dtype;
  return run(CHORUS_COLL_ALL_TO_ALLV, "all_to_allv", 0, sig,
             [&](const chorus_algorithm_plugin_v1_t* a, const chorus_algo_env_v1_t* env) {
               return a->all_to_allv(env, in, send_counts, send_offsets, out, recv_counts,
                                     recv_offsets, dtype);
             });
}

Status Communicator::send(const void* buf, size_t count, int dtype, int peer) {
  return p2p(true, const_cast<void*>(buf), count, dtype, peer);
}

Status Communicator::recv(void* buf, size_t count, int dtype, int peer) {
  return p2p(false, buf, count, dtype, peer);
}

Status Communicator::p2p(bool is_send, void* buf, size_t count, int dtype, int peer) {
  const char* what = is_send ? "send" : "recv";
  if (auto st = check_buffer(buf, count, 1, dtype, "buffer"); !st.is_ok()) return st;
  if (peer < 0 || peer >= size_ || peer == rank_)
    return {CHORUS_ERR_INVALID_ARGUMENT, std::string(what) + ": peer " + std::to_string(peer) +
                                             " is not another rank (rank " + std::to_string(rank_) +
                                             " of " + std::to_string(size_) + ")"};
  if (auto st = usable(what); !st.is_ok()) return st;
  call_deadline_ = Deadline::after(seconds_ms(cfg_.timeout_collective_s));
  call_what_ = std::string(what) + (is_send ? " to rank " : " from rank ") + std::to_string(peer);
  call_error_ = Status::ok();
  post_lost_peer_ = -1;
  std::fill(pending_sends_.begin(), pending_sends_.end(), 0);
  std::fill(pending_recvs_.begin(), pending_recvs_.end(), 0);
  t_running = this;
  struct Reset {
    Communicator* self;
    ~Reset() {
      t_running = nullptr;
      self->call_sig_active_ = false;
    }
  } reset{this};
  LogCommScope log_scope(&id_);
  if (auto st = mismatch_pending(); !st.is_ok()) return st;
  {
    CallSig sig;
    sig.call = is_send ? CallSig::kSigSend : CallSig::kSigRecv;
    sig.count = uint64_t(count) * chorus_dtype_size(dtype);
    sig.peer = peer;
    sig.seq = (is_send ? p2p_send_seq_ : p2p_recv_seq_)[size_t(peer)]++;
    begin_signature(sig, false);
  }

  (is_send ? send_ops_ : recv_ops_).fetch_add(1, std::memory_order_relaxed);
  size_t bytes = count * chorus_dtype_size(dtype);
  chorus_tp_endpoint_t* ep = endpoints_[size_t(peer) * size_t(cfg_.channels)];
  chorus_tp_mr_t* mr = nullptr;
  if (bytes > 0 && (caps_.flags & CHORUS_TP_CAP_NEEDS_REGISTRATION)) {
    if (int rc = env_mem_register(this, buf, bytes, &mr); rc != CHORUS_OK) return call_error_;
  }
  const size_t max_msg = size_t(std::min<uint64_t>(caps_.max_message_size, 1ull << 30));
  const size_t chunks = bytes == 0 ? 1 : (bytes + max_msg - 1) / max_msg;
  const size_t window =
      std::max<uint32_t>(1, is_send ? caps_.max_outstanding_sends : caps_.max_outstanding_recvs);
  size_t posted = 0, done = 0;
  auto* base = static_cast<std::byte*>(buf);
  chorus_tp_completion_t comps[16];
  int rc = CHORUS_OK;
  while (done < chunks && rc == CHORUS_OK) {
    while (posted < chunks && posted - done < window) {
      size_t off = posted * max_msg;
      size_t len = std::min(max_msg, bytes - off);
      int prc = is_send ? proxy_post_send(ep, base + off, len, mr, posted)
                        : proxy_post_recv(ep, base + off, len, mr, posted);
      if (prc == CHORUS_ERR_AGAIN) {
        retries_.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      if (prc != CHORUS_OK) {
        rc = env_fail(this, prc,
                      (std::string("posting to rank ") + std::to_string(peer) +
                       " failed: " + tp_->last_error())
                          .c_str());
        break;
      }
      ++posted;
    }
    if (rc != CHORUS_OK) break;
    int n = env_progress(this, comps, 16);
    if (n < 0) {
      rc = n;
      break;
    }
    for (int i = 0; i < n && rc == CHORUS_OK; ++i) {
      size_t idx = size_t(comps[i].wr_id);
      size_t expect = std::min(max_msg, bytes - idx * max_msg);
      if (!is_send && comps[i].byte_len != expect)
        rc = env_fail(this, CHORUS_ERR_INVALID_ARGUMENT,
                      ("received " + std::to_string(comps[i].byte_len) + " bytes from rank " +
                       std::to_string(peer) + " where " + std::to_string(expect) +
                       " were expected: send and recv counts and dtypes must match")
                          .c_str());
      ++done;
    }
  }
  // A receive needs the sender's signature; a send returns without the
  // receiver's (sends stay eager: see docs/reliability.md §4.5).
  if (rc == CHORUS_OK && call_sig_active_ && !is_send) rc = await_signatures();
  release_call_registrations();
  if (rc == CHORUS_OK) return Status::ok();
  call_error_ = settle_failure(
      call_error_.is_ok() ? Status(rc, who() + ": " + call_what_ + ": " + chorus_status_name(rc))
                          : call_error_);
  if (call_error_.code() != CHORUS_ERR_INVALID_ARGUMENT) mark_broken(call_error_);
  return call_error_;
}

void Communicator::note_posted(chorus_tp_endpoint_t* ep, bool send) {
  auto it = endpoint_peer_.find(ep);
  if (it == endpoint_peer_.end()) return;
  ++(send ? pending_sends_ : pending_recvs_)[size_t(it->second)];
}

void Communicator::note_completed(const chorus_tp_completion_t& c) {
  auto it = endpoint_peer_.find(c.endpoint);
  if (it == endpoint_peer_.end()) return;
  PeerCounters& pc = peer_counters_[size_t(it->second)];
  if (c.opcode == CHORUS_TP_SEND) {
    pc.bytes_sent.fetch_add(c.byte_len, std::memory_order_relaxed);
    pc.msgs_sent.fetch_add(1, std::memory_order_relaxed);
  } else {
    pc.bytes_recv.fetch_add(c.byte_len, std::memory_order_relaxed);
    pc.msgs_recv.fetch_add(1, std::memory_order_relaxed);
  }
  auto& counts = c.opcode == CHORUS_TP_SEND ? pending_sends_ : pending_recvs_;
  if (counts[size_t(it->second)] > 0) --counts[size_t(it->second)];
}

// ---------------------------------------------------------------------------
// Notices: peer loss, finalize, call signatures, mismatches, timeouts

namespace {

constexpr uint32_t kNoticeMagic = 0x4e53'4843;  // "CHSN" in memory on little-endian hosts
constexpr uint32_t kNoticePeerLost = 1;
constexpr uint32_t kNoticeFinalized = 2;
constexpr uint32_t kNoticeSignature = 3;  // `a`: the sender's call
constexpr uint32_t kNoticeMismatch = 4;   // `a`, `b`: the two calls that disagree
constexpr uint32_t kNoticeTimeout = 5;    // the sender timed out and is leaving
constexpr size_t kNoticeBytes = 128;
// Standing receives per peer: a peer is at most about one call ahead on a
// pair (a call does not return before it has the signatures it needs), so
// its signature for that call, a mismatch or timeout notice and its
// "finalized" notice fit with room to spare.
constexpr int kNoticeRecvSlots = 4;
constexpr int kSigSendSlots = 4;  // signature sends in flight per peer
// How long a rank that saw a peer's connections close waits for that peer's
// notice, and how long a failing rank spends sending its own.
constexpr int kNoticeGraceMs = 100;
// How long a rank that timed out waits for the other ranks' timeout notices
// before it names the ranks that sent none.
constexpr int kTimeoutGraceMs = 300;
// How long an orderly finalize waits for the peers' "finalized" notices.
// Ranks that end a job together finalize within milliseconds of each other;
// a peer that does not within this bound is left behind, and its transport
// may then report the closed connections.
constexpr int kFinalizeGraceMs = 1000;
// Notice work requests: kNoticeWrId + (peer << 8) + slot, where slot is a
// receive slot (< kNoticeRecvSlots), kSigSlotBase + a signature send slot,
// or kBroadcastSlot for a notice sent to every peer.
constexpr uint64_t kNoticeWrId = 0x6e6f'7469'6365'0000ull;  // "notice"
constexpr uint64_t kSigSlotBase = 0x80;
constexpr uint64_t kBroadcastSlot = 0xff;

// Frozen layout between the cores of one job (both ends run the same
// Chorus; the init fingerprint does not cover the version, see
// docs/reliability.md §4.5): 128 bytes, little-endian hosts.
}  // namespace

struct NoticeWire {
  uint32_t magic;
  uint32_t kind;
  int32_t lost_rank;
  int32_t reporter;
  CallSig a;
  CallSig b;
};
static_assert(sizeof(NoticeWire) == kNoticeBytes);

namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

Status Communicator::arm_notices() {
  notice_lost_.assign(size_t(size_), -1);
  notice_closed_.assign(size_t(size_), 0);
  notice_finished_.assign(size_t(size_), 0);
  notice_timeout_.assign(size_t(size_), 0);
  if (size_ < 2) return Status::ok();
  // [peer][receive slot], then [peer][signature send slot], then one slot
  // for the notices sent to every peer.
  const size_t slots = size_t(size_) * (kNoticeRecvSlots + kSigSendSlots) + 1;
  const size_t bytes = slots * kNoticeBytes;
  notice_block_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!notice_block_) return {CHORUS_ERR_SYSTEM, who() + ": cannot allocate the notice buffers"};
  std::memset(notice_block_, 0, bytes);
  if (caps_.flags & CHORUS_TP_CAP_NEEDS_REGISTRATION) {
    if (int rc = tp_->mem_register(ctx_, notice_block_, bytes, CHORUS_MEM_HOST, &notice_mr_);
        rc != CHORUS_OK)
      return {rc, who() + ": registering the notice buffers failed: " + tp_->last_error()};
  }
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    int rc = CHORUS_OK;
    for (int k = 0; k < kNoticeRecvSlots && rc == CHORUS_OK; ++k)
      rc = tp_->post_recv(notice_eps_[size_t(p)], notice_slot(p, k), kNoticeBytes, notice_mr_,
                          kNoticeWrId + (uint64_t(p) << 8) + uint64_t(k));
    if (rc != CHORUS_OK) {
      // Notices are best effort: a pair the transport cannot link (a
      // device matrix with no entry for it) or any other refusal only
      // costs the better blame message and the signature check for this
      // peer, not the job.
      log(rc == CHORUS_ERR_INVALID_ARGUMENT ? CHORUS_LOG_DEBUG : CHORUS_LOG_WARN,
          "no notices (peer loss, call signatures) with rank " + std::to_string(p) + ": " +
              tp_->last_error());
      auto* ep = notice_eps_[size_t(p)];
      notice_peer_.erase(ep);
      tp_->endpoint_close(ep);
      notice_eps_[size_t(p)] = nullptr;
    }
  }
  return Status::ok();
}

void* Communicator::notice_slot(int peer, int k) const {
  return static_cast<std::byte*>(notice_block_) +
         (size_t(peer) * kNoticeRecvSlots + size_t(k)) * kNoticeBytes;
}

void* Communicator::sig_send_slot(int peer, int k) const {
  return static_cast<std::byte*>(notice_block_) +
         (size_t(size_) * kNoticeRecvSlots + size_t(peer) * kSigSendSlots + size_t(k)) *
             kNoticeBytes;
}

void* Communicator::broadcast_slot() const {
  return static_cast<std::byte*>(notice_block_) +
         size_t(size_) * (kNoticeRecvSlots + kSigSendSlots) * kNoticeBytes;
}

int Communicator::filter_notices(chorus_tp_completion_t* out, int n) {
  if (notice_peer_.empty()) return n;
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    // Every notice work request carries kNoticeWrId + (rank << 8) + slot:
    // anything else is algorithm traffic, kept without a lookup.
    const uint64_t off = out[i].wr_id - kNoticeWrId;
    if (off >= (uint64_t(size_) << 8)) {
      out[kept++] = out[i];
      continue;
    }
    auto it = notice_peer_.find(out[i].endpoint);
    if (it == notice_peer_.end()) {
      out[kept++] = out[i];
      continue;
    }
    const int peer = it->second;
    const uint64_t slot = off & 0xff;
    if (out[i].opcode != CHORUS_TP_RECV) {  // one of our own notices went out
      if (slot >= kSigSlotBase && slot < kSigSlotBase + kSigSendSlots) {
        if (sig_sends_out_[size_t(peer)] > 0) --sig_sends_out_[size_t(peer)];
      } else {
        ++notice_sends_done_;
      }
      continue;
    }
    if (slot >= uint64_t(kNoticeRecvSlots)) continue;
    NoticeWire w{};
    std::memcpy(&w, notice_slot(peer, int(slot)), sizeof(w));
    const bool sized = out[i].byte_len == kNoticeBytes;
    // The slot is free again: keep the standing receives standing, except
    // after the peer's "finalized" notices, which take them all (say_goodbye).
    if (!(sized && w.magic == kNoticeMagic && w.kind == kNoticeFinalized) &&
        tp_->post_recv(notice_eps_[size_t(peer)], notice_slot(peer, int(slot)), kNoticeBytes,
                       notice_mr_, out[i].wr_id) != CHORUS_OK)
      notice_closed_[size_t(peer)] = 1;
    handle_notice(peer, w, sized);
  }
  return kept;
}

void Communicator::handle_notice(int peer, const NoticeWire& w, bool sized) {
  if (!sized || w.magic != kNoticeMagic || w.reporter != peer) {
    log(CHORUS_LOG_WARN, "ignoring a malformed notice from rank " + std::to_string(peer));
    return;
  }
  switch (w.kind) {
    case kNoticeFinalized:
      ++notice_finished_[size_t(peer)];
      log(CHORUS_LOG_DEBUG, "rank " + std::to_string(peer) + " finalized its communicator");
      return;
    case kNoticeSignature:
      if (w.a.rank == peer) on_signature(peer, w.a);
      return;
    case kNoticeMismatch:
      if (!mismatch_known_) {
        mismatch_known_ = true;
        mismatch_a_ = w.a;
        mismatch_b_ = w.b;
        mismatch_text_ = describe_mismatch(w.a, w.b);
        mismatch_via_ = peer;
        log(CHORUS_LOG_DEBUG,
            "rank " + std::to_string(peer) + " reports mismatched calls: " + mismatch_text_);
      }
      return;
    case kNoticeTimeout:
      notice_timeout_[size_t(peer)] = 1;
      if (timeout_first_from_ < 0) timeout_first_from_ = peer;
      log(CHORUS_LOG_DEBUG, "rank " + std::to_string(peer) + " timed out and is leaving");
      return;
    case kNoticePeerLost:
      if (w.lost_rank >= 0 && w.lost_rank < size_) {
        notice_lost_[size_t(peer)] = w.lost_rank;
        if (notice_first_from_ < 0) notice_first_from_ = peer;
        log(CHORUS_LOG_INFO, "rank " + std::to_string(peer) + " reports that it lost rank " +
                                 std::to_string(w.lost_rank) + " and is leaving");
        return;
      }
      break;
    default:
      break;
  }
  log(CHORUS_LOG_WARN, "ignoring a malformed notice from rank " + std::to_string(peer));
}

// ---------------------------------------------------------------------------
// Call signatures

void Communicator::begin_signature(const CallSig& sig, bool talk_all) {
  call_sig_ = sig;
  call_sig_.rank = rank_;
  call_sig_active_ = check_signatures_ && size_ > 1 && notice_block_ != nullptr;
  if (!call_sig_active_) return;
  std::fill(talked_.begin(), talked_.end(), 0);
  std::fill(owed_[0].begin(), owed_[0].end(), 0);
  std::fill(owed_[1].begin(), owed_[1].end(), 0);
  if (talk_all)
    for (int p = 0; p < size_; ++p)
      if (p != rank_) send_signature(p);
}

void Communicator::send_signature(int peer) {
  if (talked_[size_t(peer)]) return;
  talked_[size_t(peer)] = 1;
  auto* ep = notice_eps_[size_t(peer)];
  if (!ep) return;  // no notices with this peer: its calls go unchecked
  // Which directions of the pair this call moves data in (SigStream).
  const bool out = call_sig_.call != CallSig::kSigRecv;
  const bool in = call_sig_.call != CallSig::kSigSend;
  for (int dir = 0; dir < 2; ++dir) {
    if (!(dir == 0 ? out : in)) continue;
    SigStream& s = streams_[size_t(peer)][size_t(dir)];
    s.mine.push_back(call_sig_);
    ++s.pushed;
    // A send does not wait for its receiver (sends stay eager).
    if (call_sig_.call != CallSig::kSigSend) owed_[dir][size_t(peer)] = s.pushed;
    CallSig a, b;
    if (!s.match(a, b)) note_mismatch(a, b, -1);
  }
  // Every slot busy means the peer stopped taking notices; progress until
  // one frees, bounded by the call's deadline.
  if (sig_sends_out_[size_t(peer)] >= kSigSendSlots)
    pump_notices(call_deadline_, [&] { return sig_sends_out_[size_t(peer)] < kSigSendSlots; });
  if (sig_sends_out_[size_t(peer)] >= kSigSendSlots) return;
  const uint32_t k = sig_send_next_[size_t(peer)]++ % kSigSendSlots;
  NoticeWire w{kNoticeMagic, kNoticeSignature, -1, rank_, call_sig_, CallSig{}};
  void* slot = sig_send_slot(peer, int(k));
  std::memcpy(slot, &w, sizeof(w));
  if (tp_->post_send(ep, slot, kNoticeBytes, notice_mr_,
                     kNoticeWrId + (uint64_t(peer) << 8) + kSigSlotBase + k) == CHORUS_OK) {
    ++sig_sends_out_[size_t(peer)];
  } else {
    // The peer is gone or unreachable: the data posts report it. Nothing
    // more is owed by this peer in this call.
    owed_[0][size_t(peer)] = owed_[1][size_t(peer)] = 0;
  }
}

void Communicator::on_signature(int peer, const CallSig& theirs) {
  if (!check_signatures_) return;
  // The peer's send feeds this rank's receive direction, its receive this
  // rank's send direction; a collective is in both.
  const bool to_out = theirs.call != CallSig::kSigSend;
  const bool to_in = theirs.call != CallSig::kSigRecv;
  for (int dir = 0; dir < 2; ++dir) {
    if (!(dir == 0 ? to_out : to_in)) continue;
    SigStream& s = streams_[size_t(peer)][size_t(dir)];
    s.theirs.push_back(theirs);
    CallSig a, b;
    if (!s.match(a, b)) {
      note_mismatch(a, b, -1);
      return;
    }
  }
  // The peer's part of the collective running here, from a peer this rank
  // has not talked to (yet): a rank running a different collective may
  // never post to this one, so compare now rather than never.
  if (call_sig_active_ && call_sig_.is_collective() && theirs.is_collective() &&
      !talked_[size_t(peer)] && theirs.seq == call_sig_.seq && !signatures_agree(call_sig_, theirs))
    note_mismatch(call_sig_, theirs, -1);
}

void Communicator::note_mismatch(const CallSig& mine, const CallSig& theirs, int reported_by) {
  if (mismatch_known_) return;
  mismatch_known_ = true;
  mismatch_a_ = mine;
  mismatch_b_ = theirs;
  mismatch_text_ = describe_mismatch(mine, theirs);
  mismatch_via_ = reported_by;
  log(CHORUS_LOG_DEBUG, "mismatched calls: " + mismatch_text_);
}

std::string Communicator::mismatch_message() const {
  return "mismatched calls: " + mismatch_text_ +
         (mismatch_via_ >= 0 ? " (reported by rank " + std::to_string(mismatch_via_) + ")" : "") +
         "; every rank must make the same calls in the same order, with the same count, dtype, "
         "op and root, and matching send/recv sizes; this communicator cannot be used any more";
}

Status Communicator::mismatch_pending() {
  if (!mismatch_known_) return Status::ok();
  Status st(CHORUS_ERR_MISMATCH, who() + ": " + call_what_ + ": " + mismatch_message());
  if (mismatch_via_ < 0 && !mismatch_sent_) {
    mismatch_sent_ = true;
    broadcast_notice(kNoticeMismatch, &mismatch_a_, &mismatch_b_);
  }
  mark_broken(st);
  return st;
}

bool Communicator::mismatch_blocks_call() const {
  if (!mismatch_known_) return false;
  // A rank told of a mismatch while it still finishes an earlier, matched
  // collective completes that one; the mismatch fails the next call.
  if (mismatch_via_ < 0 || !call_sig_active_ || !call_sig_.is_collective()) return true;
  uint64_t first = UINT64_MAX;
  for (const CallSig* s : {&mismatch_a_, &mismatch_b_})
    if (s->is_collective()) first = std::min(first, s->seq);
  return call_sig_.seq >= first;
}

bool Communicator::signatures_matched() const {
  for (int p = 0; p < size_; ++p)
    for (int dir = 0; dir < 2; ++dir)
      if (owed_[dir][size_t(p)] > streams_[size_t(p)][size_t(dir)].matched) return false;
  return true;
}

int Communicator::owed_peer_gone() const {
  if (notice_closed_.empty()) return -1;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !notice_closed_[size_t(p)]) continue;
    for (int dir = 0; dir < 2; ++dir)
      if (owed_[dir][size_t(p)] > streams_[size_t(p)][size_t(dir)].matched) return p;
  }
  return -1;
}

int Communicator::await_signatures() {
  if (signatures_matched() && !mismatch_blocks_call()) return CHORUS_OK;
  awaiting_signatures_ = true;
  chorus_tp_completion_t comps[16];
  int rc = CHORUS_OK;
  while (!signatures_matched() || mismatch_blocks_call()) {
    int n = env_progress(this, comps, 16);
    if (n < 0) {
      rc = n;
      break;
    }
  }
  awaiting_signatures_ = false;
  return rc;
}

Status Communicator::settle_failure(Status st) {
  if (st.code() == CHORUS_ERR_ABORTED) return st;
  // A mismatched peer makes the data fail in many ways (a short receive, a
  // hang until the deadline, a peer that leaves): its signature tells why.
  // Wait a short grace for the signatures this call still needs.
  if (!mismatch_known_ && call_sig_active_ && !signatures_matched() && !notice_peer_.empty())
    pump_notices(Deadline::after(std::chrono::milliseconds(kNoticeGraceMs)),
                 [&] { return mismatch_known_ || signatures_matched(); });
  if (!mismatch_known_) return st;
  if (mismatch_via_ < 0 && !mismatch_sent_) {
    mismatch_sent_ = true;
    broadcast_notice(kNoticeMismatch, &mismatch_a_, &mismatch_b_);
  }
  return {CHORUS_ERR_MISMATCH, who() + ": " + call_what_ + ": " + mismatch_message()};
}

Status Communicator::timeout_status(const std::string& head) {
  if (!timeout_sent_ && !notice_peer_.empty()) {
    timeout_sent_ = true;
    broadcast_notice(kNoticeTimeout, nullptr, nullptr);
  }
  const bool p2p = !call_sig_.is_collective();
  const int p2p_peer = call_sig_.peer;
  auto involved = [&](int p) { return p != rank_ && (!p2p || p == p2p_peer); };
  auto heard = [&](int p) {
    return !notice_eps_[size_t(p)] || notice_timeout_[size_t(p)] || notice_closed_[size_t(p)] ||
           notice_finished_[size_t(p)] || notice_lost_[size_t(p)] >= 0;
  };
  // Every live rank of the call times out within about one call of the
  // others, or is told by the first one; a rank that says nothing in the
  // grace is the one stuck.
  if (!notice_peer_.empty())
    pump_notices(Deadline::after(std::chrono::milliseconds(kTimeoutGraceMs)), [&] {
      for (int p = 0; p < size_; ++p)
        if (involved(p) && !heard(p)) return false;
      return true;
    });
  std::vector<int> timed_out, silent;
  for (int p = 0; p < size_; ++p) {
    if (!involved(p) || !notice_eps_[size_t(p)]) continue;
    if (notice_timeout_[size_t(p)])
      timed_out.push_back(p);
    else if (!heard(p))
      silent.push_back(p);
  }
  std::string msg = head + outstanding_peers();
  if (!silent.empty())
    msg += "; rank(s) " + rank_list(silent) + " sent no word: stopped, hung, or not in this call";
  if (!timed_out.empty()) msg += "; rank(s) " + rank_list(timed_out) + " timed out too (alive)";
  msg += "; raise timeout.collective / CHORUS_TIMEOUT_COLLECTIVE if a rank is legitimately slow";
  return {CHORUS_ERR_TIMEOUT, msg};
}

void Communicator::broadcast_notice(uint32_t kind, const CallSig* a, const CallSig* b) {
  if (!notice_block_ || size_ < 2) return;
  NoticeWire w{
      kNoticeMagic,      kind, kind == kNoticePeerLost ? lost_rank_ : -1, rank_, a ? *a : CallSig{},
      b ? *b : CallSig{}};
  void* slot = broadcast_slot();
  std::memcpy(slot, &w, sizeof(w));
  int posted = 0;
  notice_sends_done_ = 0;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !notice_eps_[size_t(p)] || notice_closed_[size_t(p)]) continue;
    if (kind == kNoticePeerLost && p == lost_rank_) continue;
    if (tp_->post_send(notice_eps_[size_t(p)], slot, kNoticeBytes, notice_mr_,
                       kNoticeWrId + (uint64_t(p) << 8) + kBroadcastSlot) == CHORUS_OK)
      ++posted;
  }
  // Push them out before the caller can exit and close the connections; a
  // peer that is gone fails its send at once, and none may take longer than
  // the grace.
  pump_notices(Deadline::after(std::chrono::milliseconds(kNoticeGraceMs)),
               [&] { return notice_sends_done_ >= posted; });
  log(CHORUS_LOG_DEBUG, "sent notice kind " + std::to_string(kind) + " to " +
                            std::to_string(notice_sends_done_) + " of " + std::to_string(posted) +
                            " peers");
}

void Communicator::resolve_lost(int peer) {
  lost_rank_ = peer;
  lost_via_ = -1;
  if (notice_lost_.empty()) return;
  // A peer that left because it lost another rank sent its notice before
  // closing its connections; it may still be in flight on another connection.
  // The notice travels on the notice connection ahead of that connection's
  // close, so once the peer's notice endpoint failed without one, none is
  // coming: the peer itself is gone, and the grace is not spent.
  pump_notices(
      Deadline::after(std::chrono::milliseconds(call_deadline_.remaining_ms(kNoticeGraceMs))), [&] {
        return notice_lost_[size_t(peer)] >= 0 || notice_closed_[size_t(peer)] ||
               notice_finished_[size_t(peer)] || notice_timeout_[size_t(peer)] || mismatch_known_;
      });
  const int reported = notice_lost_[size_t(peer)];
  if (reported >= 0 && reported != peer && reported != rank_) {
    lost_rank_ = reported;
    lost_via_ = peer;
  }
}

bool Communicator::note_notice_error(const chorus_tp_error_t& e) {
  auto it = notice_peer_.find(e.endpoint);
  if (it == notice_peer_.end()) return false;
  if (e.opcode == CHORUS_TP_RECV && !notice_closed_.empty()) notice_closed_[size_t(it->second)] = 1;
  if (e.opcode == CHORUS_TP_SEND) ++notice_sends_done_;  // failed, but no longer pending
  return true;
}

bool Communicator::drain_notices() {
  chorus_tp_completion_t comps[16];
  for (;;) {
    int n = tp_->poll(ctx_, comps, 16);
    if (n > 0) {
      filter_notices(comps, n);  // a failed call's own completions no longer matter
      continue;
    }
    if (n == CHORUS_ERR_PENDING) {
      chorus_tp_error_t e{};
      if (tp_->read_error(ctx_, &e) != CHORUS_OK) return false;
      note_notice_error(e);
      continue;
    }
    return n == 0;
  }
}

void Communicator::pump_notices(const Deadline& limit, const std::function<bool()>& done) {
  while (!done() && !limit.expired() && !aborted_.load()) {
    if (!drain_notices() || done()) break;
    tp_->wait(ctx_, std::max(1, limit.remaining_ms(kNoticeGraceMs)));
  }
}

void Communicator::note_post_lost(const chorus_tp_endpoint_t* ep) {
  if (post_lost_peer_ >= 0) return;
  if (auto it = endpoint_peer_.find(ep); it != endpoint_peer_.end()) post_lost_peer_ = it->second;
}

std::string Communicator::lost_suffix(int peer) {
  resolve_lost(peer);
  return resolved_lost_suffix(peer);
}

std::string Communicator::resolved_lost_suffix(int peer) const {
  if (lost_via_ < 0)
    return " (rank " + std::to_string(peer) + " is lost; the communicator must be rebuilt)";
  return " (rank " + std::to_string(lost_rank_) + " is lost: rank " + std::to_string(peer) +
         " reported losing it before it left; the communicator must be rebuilt)";
}

std::string Communicator::notice_message() const {
  const int from = notice_first_from_;
  const int lost = notice_lost_[size_t(from)];
  if (lost == rank_)
    return "rank " + std::to_string(from) + " lost its connection to this rank and left (rank " +
           std::to_string(from) + " is lost; the communicator must be rebuilt)";
  return "rank " + std::to_string(from) + " reported losing rank " + std::to_string(lost) +
         " and left (rank " + std::to_string(lost) + " is lost; the communicator must be rebuilt)";
}

void Communicator::send_notices() { broadcast_notice(kNoticePeerLost, nullptr, nullptr); }

void Communicator::say_goodbye() {
  if (!notice_block_ || size_ < 2) return;
  // A peer that already finalized and left has closed its notice connection:
  // take that in first, so no goodbye is written to a closed connection.
  if (!drain_notices()) return;
  NoticeWire w{kNoticeMagic, kNoticeFinalized, -1, rank_, CallSig{}, CallSig{}};
  void* slot = broadcast_slot();
  std::memcpy(slot, &w, sizeof(w));
  int posted = 0;
  notice_sends_done_ = 0;
  // One notice per standing receive of the peer: none is left outstanding
  // when this rank's connections close, so the peer's transport sees an
  // orderly close.
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !notice_eps_[size_t(p)] || notice_closed_[size_t(p)]) continue;
    for (int k = 0; k < kNoticeRecvSlots; ++k)
      if (tp_->post_send(notice_eps_[size_t(p)], slot, kNoticeBytes, notice_mr_,
                         kNoticeWrId + (uint64_t(p) << 8) + kBroadcastSlot) == CHORUS_OK)
        ++posted;
  }
  // Every rank waits for every peer's goodbye before it closes: the last
  // goodbye a rank receives was sent to a connection that was still open.
  auto everyone_done = [&] {
    if (notice_sends_done_ < posted) return false;
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && notice_eps_[size_t(p)] && notice_finished_[size_t(p)] < kNoticeRecvSlots &&
          !notice_closed_[size_t(p)])
        return false;
    return true;
  };
  pump_notices(Deadline::after(std::chrono::milliseconds(kFinalizeGraceMs)), everyone_done);
  if (!everyone_done()) {
    std::string missing;
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && notice_eps_[size_t(p)] && notice_finished_[size_t(p)] < kNoticeRecvSlots &&
          !notice_closed_[size_t(p)])
        missing += (missing.empty() ? "" : ", ") + std::to_string(p);
    log(CHORUS_LOG_DEBUG,
        "finalized without waiting longer for rank(s) " +
            (missing.empty() ? std::string("(none; own notices pending)") : missing));
  }
}

std::string Communicator::outstanding_peers() const {
  auto list = [](const std::vector<int>& counts) {
    std::string s;
    for (size_t p = 0; p < counts.size(); ++p)
      if (counts[p] > 0) s += (s.empty() ? "" : ", ") + std::to_string(p);
    return s;
  };
  std::string recvs = list(pending_recvs_), sends = list(pending_sends_);
  std::string out;
  if (!recvs.empty()) out += "; still waiting to receive from rank(s) " + recvs;
  if (!sends.empty()) out += "; sends to rank(s) " + sends + " not yet taken";
  return out;
}

void Communicator::signature_after_post(const chorus_tp_endpoint_t* ep) {
  if (!call_sig_active_) return;
  auto it = endpoint_peer_.find(ep);
  if (it != endpoint_peer_.end() && !talked_[size_t(it->second)]) send_signature(it->second);
}

int Communicator::proxy_post_send(chorus_tp_endpoint_t* ep, const void* buf, size_t length,
                                  chorus_tp_mr_t* mr, uint64_t wr_id) {
  Communicator* self = t_running;
  if (!self) return CHORUS_ERR_INTERNAL;
  int rc = self->after_post(ep, true, self->tp_->post_send(ep, buf, length, mr, wr_id));
  self->signature_after_post(ep);
  return rc;
}

int Communicator::proxy_post_recv(chorus_tp_endpoint_t* ep, void* buf, size_t length,
                                  chorus_tp_mr_t* mr, uint64_t wr_id) {
  Communicator* self = t_running;
  if (!self) return CHORUS_ERR_INTERNAL;
  int rc = self->after_post(ep, false, self->tp_->post_recv(ep, buf, length, mr, wr_id));
  self->signature_after_post(ep);
  return rc;
}

int Communicator::after_post(chorus_tp_endpoint_t* ep, bool send, int rc) {
  if (rc == CHORUS_OK)
    note_posted(ep, send);
  else if (rc == CHORUS_ERR_AGAIN)
    retries_.fetch_add(1, std::memory_order_relaxed);
  else if (rc == CHORUS_ERR_PEER_LOST)
    note_post_lost(ep);
  return rc;
}

int Communicator::proxy_poll(chorus_tp_context_t* ctx, chorus_tp_completion_t* out, size_t max) {
  Communicator* self = t_running;
  if (!self) return CHORUS_ERR_INTERNAL;
  if (ctx != self->ctx_) return self->tp_->poll(ctx, out, max);
  if (self->mismatch_blocks_call() && !self->has_pending_error_) {
    // An algorithm that polls without env->progress learns of the mismatch
    // as a failed completion; the call then reports MISMATCH.
    self->pending_error_ = {};
    self->pending_error_.status = CHORUS_ERR_MISMATCH;
    self->pending_error_.peer_rank = -1;
    std::snprintf(self->pending_error_.message, sizeof(self->pending_error_.message), "%s",
                  self->mismatch_text_.c_str());
    self->has_pending_error_ = true;
  }
  int n = self->poll_data(out, max);
  for (int i = 0; i < n; ++i) self->note_completed(out[i]);
  return n;
}

int Communicator::proxy_read_error(chorus_tp_context_t* ctx, chorus_tp_error_t* err_out) {
  Communicator* self = t_running;
  if (!self) return CHORUS_ERR_INTERNAL;
  if (ctx == self->ctx_ && self->has_pending_error_) {
    *err_out = self->pending_error_;
    self->has_pending_error_ = false;
    return CHORUS_OK;
  }
  return self->tp_->read_error(ctx, err_out);
}

int Communicator::poll_data(chorus_tp_completion_t* out, size_t max) {
  for (;;) {
    if (has_pending_error_) return CHORUS_ERR_PENDING;
    int n = tp_->poll(ctx_, out, max);
    if (n > 0) return filter_notices(out, n);
    if (n != CHORUS_ERR_PENDING) return n;
    chorus_tp_error_t e{};
    if (int rc = tp_->read_error(ctx_, &e); rc != CHORUS_OK) {
      e = {};
      e.status = CHORUS_ERR_INTERNAL;
      e.peer_rank = -1;
      std::snprintf(e.message, sizeof(e.message),
                    "poll reported an error but read_error failed: %s", tp_->last_error());
    } else if (note_notice_error(e) && e.status == CHORUS_ERR_PEER_LOST) {
      // A peer closed its notice endpoint: it finished or died. Its data
      // endpoints tell whether the running call still needed it.
      continue;
    }
    // Anything else on a notice endpoint (a local or transport error on a
    // standing receive or a signature) leaves this pair without failure
    // notices and signature checks: the running call fails with it, truthfully,
    // rather than going on unchecked.
    pending_error_ = e;
    has_pending_error_ = true;
    return CHORUS_ERR_PENDING;
  }
}

chorus_tp_endpoint_t* Communicator::env_endpoint(void* core, int peer, int channel) {
  auto* self = static_cast<Communicator*>(core);
  if (peer < 0 || peer >= self->size_ || channel < 0 || channel >= self->cfg_.channels)
    return nullptr;
  return self->endpoints_[size_t(peer) * size_t(self->cfg_.channels) + size_t(channel)];
}

int Communicator::env_mem_register(void* core, const void* addr, size_t length,
                                   chorus_tp_mr_t** mr_out) {
  auto* self = static_cast<Communicator*>(core);
  *mr_out = nullptr;
  if (!(self->caps_.flags & CHORUS_TP_CAP_NEEDS_REGISTRATION) || length == 0) return CHORUS_OK;
  // The frozen transport ABI v1 takes `void*` (plugins implement it);
  // registering does not write through it.
  int rc =
      self->tp_->mem_register(self->ctx_, const_cast<void*>(addr), length, CHORUS_MEM_HOST, mr_out);
  if (rc != CHORUS_OK)
    return env_fail(core, rc,
                    (std::string("registering ") + std::to_string(length) +
                     " bytes failed: " + self->tp_->last_error())
                        .c_str());
  self->call_mrs_.push_back(*mr_out);
  return CHORUS_OK;
}

int Communicator::env_progress(void* core, chorus_tp_completion_t* out, size_t max) {
  auto* self = static_cast<Communicator*>(core);
  for (;;) {
    if (self->aborted_.load())
      return env_fail(core, CHORUS_ERR_ABORTED,
                      self->finalizing_.load()
                          ? "aborted: the communicator was finalized with this operation pending"
                          : "aborted by chorus_comm_abort()");
    if (self->mismatch_blocks_call())
      return env_fail(core, CHORUS_ERR_MISMATCH, self->mismatch_message().c_str());
    int n = self->poll_data(out, max);
    if (n > 0) {
      for (int i = 0; i < n; ++i) self->note_completed(out[i]);
      return n;
    }
    if (self->mismatch_blocks_call())
      return env_fail(core, CHORUS_ERR_MISMATCH, self->mismatch_message().c_str());
    if (n == 0 && self->awaiting_signatures_ && self->signatures_matched()) return 0;
    if (n == 0 && self->timeout_first_from_ >= 0 && self->call_sig_.is_collective()) {
      // A rank of this collective timed out and is leaving: it cannot complete.
      const int from = self->timeout_first_from_;
      Status st = self->timeout_status(
          "rank " + std::to_string(from) + " timed out (timeout.collective = " +
          format_seconds(self->cfg_.timeout_collective_s) + " s) and is leaving");
      return env_fail(core, CHORUS_ERR_TIMEOUT, st.message().c_str());
    }
    if (n == 0 && self->notice_first_from_ >= 0) {
      // Another rank left because it lost a peer: this call cannot complete.
      const int from = self->notice_first_from_, lost = self->notice_lost_[size_t(from)];
      self->lost_rank_ = lost == self->rank_ ? from : lost;
      self->lost_via_ = from;
      return env_fail(core, CHORUS_ERR_PEER_LOST, self->notice_message().c_str());
    }
    if (n == CHORUS_ERR_PENDING) {
      chorus_tp_error_t err = self->pending_error_;
      self->has_pending_error_ = false;
      err.message[sizeof(err.message) - 1] = '\0';
      std::string msg = std::string("transport '") + self->cfg_.transport + "' failed a " +
                        (err.opcode == CHORUS_TP_SEND ? "send to" : "receive from") + " rank " +
                        std::to_string(err.peer_rank) + ": " + err.message;
      if (err.status == CHORUS_ERR_PEER_LOST && err.peer_rank >= 0 && err.peer_rank < self->size_) {
        const int peer = err.peer_rank;
        self->resolve_lost(peer);
        if (!self->notice_timeout_.empty() && self->notice_timeout_[size_t(peer)]) {
          // It closed its connections because it timed out: alive, not lost.
          Status st = self->timeout_status(
              "rank " + std::to_string(peer) + " timed out (timeout.collective = " +
              format_seconds(self->cfg_.timeout_collective_s) + " s) and closed its connections");
          return env_fail(core, CHORUS_ERR_TIMEOUT, st.message().c_str());
        }
        msg += self->resolved_lost_suffix(peer);
      }
      return env_fail(core, err.status < 0 ? err.status : CHORUS_ERR_SYSTEM, msg.c_str());
    }
    if (n < 0)
      return env_fail(core, n, (std::string("poll failed: ") + self->tp_->last_error()).c_str());
    if (n == 0 && self->awaiting_signatures_) {
      // A peer whose signature this call still needs closed its connection
      // (it died): the signature will never come, and waiting for the
      // deadline would call the survivors' state a timeout.
      if (const int p = self->owed_peer_gone(); p >= 0) {
        const std::string msg = "rank " + std::to_string(p) +
                                " closed its connections before its part of this call arrived" +
                                self->lost_suffix(p);
        return env_fail(core, CHORUS_ERR_PEER_LOST, msg.c_str());
      }
    }
    if (self->call_deadline_.expired()) {
      Status st = self->timeout_status("did not complete within timeout.collective = " +
                                       format_seconds(self->cfg_.timeout_collective_s) + " s");
      return env_fail(core, CHORUS_ERR_TIMEOUT, st.message().c_str());
    }
    // Sleep in the transport; wake at least every 200 ms to re-check abort
    // for transports without interrupt().
    auto t0 = std::chrono::steady_clock::now();
    int rc = self->tp_->wait(self->ctx_, self->call_deadline_.remaining_ms(200));
    self->transport_wait_ns_.fetch_add(
        uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - t0)
                     .count()),
        std::memory_order_relaxed);
    if (rc != CHORUS_OK && rc != CHORUS_ERR_TIMEOUT)
      return env_fail(core, rc, (std::string("wait failed: ") + self->tp_->last_error()).c_str());
  }
}

int Communicator::env_fail(void* core, int status, const char* message) {
  auto* self = static_cast<Communicator*>(core);
  if (self->call_error_.is_ok()) {
    std::string text = message ? message : "";
    // A post the transport refused because the peer is gone: same verdict
    // as a lost-peer completion (the algorithm's message lacks the suffix).
    if (status == CHORUS_ERR_PEER_LOST && self->post_lost_peer_ >= 0 && self->lost_rank_ < 0)
      text += self->lost_suffix(self->post_lost_peer_);
    self->call_error_ = Status(status, self->who() + ": " + self->call_what_ + ": " + text);
  }
  return status;
}

void Communicator::env_log(void* core, int level, const char* message) {
  auto* self = static_cast<Communicator*>(core);
  if (log_enabled(level)) self->log(level, message ? message : "");
}

std::string Communicator::who() const {
  // World communicators keep the short form that existing messages use.
  if (id_.empty() || id_[0] != 'w' || id_.find('.') == std::string::npos)
    return "rank " + std::to_string(rank_);
  return "rank " + std::to_string(rank_) + " of comm " + id_;
}

void Communicator::log(int level, const std::string& message) const {
  if (log_enabled(level)) log_line(level, rank_, "comm " + id_ + ": " + message);
}

// ---------------------------------------------------------------------------
// Requests and the execution stream

bool Request::wait_for(int timeout_ms) {
  std::unique_lock lock(mu_);
  auto is_done = [&] { return state_ == State::kDone; };
  if (timeout_ms < 0) {
    cv_.wait(lock, is_done);
    return true;
  }
  return cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), is_done);
}

bool Request::done() const {
  std::lock_guard lock(mu_);
  return state_ == State::kDone;
}

Request::State Request::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

Status Request::status() const {
  std::lock_guard lock(mu_);
  return status_;
}

void Request::set_running() {
  std::lock_guard lock(mu_);
  state_ = State::kRunning;
}

void Request::finish(Status st) {
  std::function<Status(Communicator&)> drop;
  {
    std::lock_guard lock(mu_);
    if (state_ == State::kDone) return;
    state_ = State::kDone;
    status_ = std::move(st);
    drop.swap(body_);
  }
  cv_.notify_all();
}

void Communicator::run_request(Request& req) {
  req.set_running();
  Status st;
  uint64_t cut;
  std::string cut_what;
  {
    std::lock_guard lock(q_mu_);
    cut = cut_after_;
    if (req.seq() > cut) cut_what = cut_what_;  // copied only when it is reported
  }
  if (req.seq() > cut) {
    st = {CHORUS_ERR_ABORTED, who() + ": " + req.what() + ": an earlier request (" + cut_what +
                                  ") was cancelled on this rank, so later operations no longer "
                                  "match the other ranks; finalize this communicator"};
  } else {
    try {
      st = req.body_(*this);
    } catch (const std::bad_alloc&) {
      st = {CHORUS_ERR_SYSTEM, who() + ": " + req.what() + ": out of memory"};
    } catch (const std::exception& e) {
      st = {CHORUS_ERR_INTERNAL, who() + ": " + req.what() + ": internal error: " + e.what()};
    }
  }
  // Every operation that ends with an error is counted here, once.
  if (!st.is_ok()) count_failed();
  req.finish(std::move(st));
}

Status Communicator::execute(const char* what, std::function<Status(Communicator&)> body) {
  std::unique_lock lock(q_mu_);
  if (stopping_) {
    count_failed();
    return {CHORUS_ERR_ABORTED, who() + ": " + what + ": the communicator is being finalized"};
  }
  auto req = std::make_shared<Request>(next_seq_++, what, std::move(body));
  if (!busy_ && queue_.empty()) {
    // Nothing ahead of this call: run it here, without a thread hop.
    busy_ = true;
    lock.unlock();
    inline_ops_.fetch_add(1, std::memory_order_relaxed);
    run_request(*req);
    lock.lock();
    busy_ = false;
    lock.unlock();
    q_cv_.notify_all();
    return req->status();
  }
  queue_.push_back(req);
  queued_ops_.fetch_add(1, std::memory_order_relaxed);
  if (!worker_.joinable()) worker_ = std::thread([this] { worker_main(); });
  lock.unlock();
  q_cv_.notify_all();
  auto t0 = std::chrono::steady_clock::now();
  req->wait_for(-1);
  add_request_wait(uint64_t(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
          .count()));
  return req->status();
}

std::shared_ptr<Request> Communicator::submit(const char* what,
                                              std::function<Status(Communicator&)> body) {
  std::unique_lock lock(q_mu_);
  auto req = std::make_shared<Request>(next_seq_++, what, std::move(body));
  requests_issued_.fetch_add(1, std::memory_order_relaxed);
  queued_ops_.fetch_add(1, std::memory_order_relaxed);
  if (stopping_) {
    count_failed();
    req->finish(
        {CHORUS_ERR_ABORTED, who() + ": " + what + ": the communicator is being finalized"});
    return req;
  }
  queue_.push_back(req);
  if (!worker_.joinable()) worker_ = std::thread([this] { worker_main(); });
  lock.unlock();
  q_cv_.notify_all();
  return req;
}

Status Communicator::cancel(const std::shared_ptr<Request>& req) {
  std::unique_lock lock(q_mu_);
  auto it = std::find(queue_.begin(), queue_.end(), req);
  if (it == queue_.end())
    return {CHORUS_ERR_NOT_SUPPORTED,
            who() + ": " + req->what() + ": " +
                (req->done() ? "already complete"
                             : "already started; wait for it, or abort the communicator") +
                "; only a request that has not started can be cancelled"};
  queue_.erase(it);
  if (req->seq() < cut_after_) {
    cut_after_ = req->seq();
    cut_what_ = req->what() + " #" + std::to_string(req->seq());
  }
  requests_cancelled_.fetch_add(1, std::memory_order_relaxed);
  lock.unlock();
  log(CHORUS_LOG_INFO, "request " + req->what() + " #" + std::to_string(req->seq()) +
                           " cancelled; later operations on this communicator will fail");
  req->finish({CHORUS_ERR_ABORTED, who() + ": " + req->what() + ": cancelled by chorus_cancel()"});
  return Status::ok();
}

void Communicator::worker_main() {
  std::unique_lock lock(q_mu_);
  for (;;) {
    q_cv_.wait(lock, [&] { return stopping_ || (!busy_ && !queue_.empty()); });
    if (stopping_) {
      // Finalizing: whatever is still queued completes as aborted without
      // running (the destructor already aborted a running one).
      auto left = std::move(queue_);
      queue_.clear();
      lock.unlock();
      for (auto& r : left)
        r->finish({CHORUS_ERR_ABORTED,
                   who() + ": " + r->what() + ": the communicator was finalized before it ran"});
      return;
    }
    auto req = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    run_request(*req);
    req.reset();
    lock.lock();
    busy_ = false;
    q_cv_.notify_all();
  }
}

// ---------------------------------------------------------------------------
// Issue-time argument checks

Status Communicator::check_all_reduce(const void* in, const void* out, size_t count, int dtype,
                                      int op) const {
  if (auto st = check_buffer(in, count, 1, dtype, "input"); !st.is_ok()) return st;
  if (auto st = check_buffer(out, count, 1, dtype, "output"); !st.is_ok()) return st;
  if (auto st = check_op(dtype, op); !st.is_ok()) return st;
  const uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  if (in == out) return Status::ok();  // in place
  return check_disjoint("all_reduce", in, bytes, out, bytes, "in == out (in place)");
}

Status Communicator::check_all_gather(const void* in, const void* out, size_t count,
                                      int dtype) const {
  if (auto st = check_buffer(in, count, 1, dtype, "input"); !st.is_ok()) return st;
  if (auto st = check_buffer(out, count, size_t(size_), dtype, "output"); !st.is_ok()) return st;
  const uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  // In place: the input is this rank's own block of the output.
  if (reinterpret_cast<uintptr_t>(in) == reinterpret_cast<uintptr_t>(out) + uint64_t(rank_) * bytes)
    return Status::ok();
  return check_disjoint("all_gather", in, bytes, out, bytes * uint64_t(size_),
                        "in == out + rank * count (in place)");
}

Status Communicator::check_reduce_scatter(const void* in, const void* out, size_t count, int dtype,
                                          int op) const {
  if (auto st = check_buffer(in, count, size_t(size_), dtype, "input"); !st.is_ok()) return st;
  if (auto st = check_buffer(out, count, 1, dtype, "output"); !st.is_ok()) return st;
  if (auto st = check_op(dtype, op); !st.is_ok()) return st;
  const uint64_t bytes = uint64_t(count) * chorus_dtype_size(dtype);
  return check_disjoint("reduce_scatter", in, bytes * uint64_t(size_), out, bytes, "");
}

Status Communicator::check_broadcast(const void* buf, size_t count, int dtype, int root) const {
  if (auto st = check_buffer(buf, count, 1, dtype, "buffer"); !st.is_ok()) return st;
  if (root < 0 || root >= size_)
    return {CHORUS_ERR_INVALID_ARGUMENT, "broadcast root " + std::to_string(root) +
                                             " is out of range for " + std::to_string(size_) +
                                             " ranks"};
  return Status::ok();
}

Status Communicator::check_p2p(const char* what, const void* buf, size_t count, int dtype,
                               int peer) const {
  if (auto st = check_buffer(buf, count, 1, dtype, "buffer"); !st.is_ok()) return st;
  if (peer < 0 || peer >= size_ || peer == rank_)
    return {CHORUS_ERR_INVALID_ARGUMENT, std::string(what) + ": peer " + std::to_string(peer) +
                                             " is not another rank (rank " + std::to_string(rank_) +
                                             " of " + std::to_string(size_) + ")"};
  return Status::ok();
}

// ---------------------------------------------------------------------------
// Issue-time checks of reduce, gather, scatter, all_to_all(v)

namespace {

/// Whether [a, a+n) and [b, b+m) share a byte.
bool overlaps(const void* a, size_t n, const void* b, size_t m) {
  if (!a || !b || n == 0 || m == 0) return false;
  auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + m && y < x + n;
}

Status check_root(const char* what, int root, int size) {
  if (root < 0 || root >= size)
    return {CHORUS_ERR_INVALID_ARGUMENT, std::string(what) + " root " + std::to_string(root) +
                                             " is out of range for " + std::to_string(size) +
                                             " ranks (valid: 0.." + std::to_string(size - 1) + ")"};
  return Status::ok();
}

Status bad_overlap(const char* what, const std::string& allowed) {
  return {CHORUS_ERR_INVALID_ARGUMENT,
          std::string(what) + ": the input and output buffers overlap; " + allowed};
}

}  // namespace

Status Communicator::check_reduce(const void* in, const void* out, size_t count, int dtype, int op,
                                  int root) const {
  if (auto st = check_root("reduce", root, size_); !st.is_ok()) return st;
  if (auto st = check_buffer(in, count, 1, dtype, "input"); !st.is_ok()) return st;
  if (rank_ == root) {
    if (auto st = check_buffer(out, count, 1, dtype, "output (on the root)"); !st.is_ok())
      return st;
    size_t bytes = count * chorus_dtype_size(dtype);
    if (in != out && overlaps(in, bytes, out, bytes))
      return bad_overlap("reduce", "they must be the same buffer (in place) or disjoint");
  }
  return check_op(dtype, op);
}

Status Communicator::check_gather(const void* in, const void* out, size_t count, int dtype,
                                  int root) const {
  return check_rooted_blocks("gather", in, "input", out, "output", count, dtype, root);
}

Status Communicator::check_scatter(const void* in, const void* out, size_t count, int dtype,
                                   int root) const {
  return check_rooted_blocks("scatter", out, "output", in, "input", count, dtype, root);
}

Status Communicator::check_rooted_blocks(const char* what, const void* block_buf,
                                         const char* block_name, const void* root_buf,
                                         const char* root_name, size_t count, int dtype,
                                         int root) const {
  // gather and scatter are mirror images: every rank passes one block, the
  // root also the size*count buffer, whose block `root` may be the same memory.
  if (auto st = check_root(what, root, size_); !st.is_ok()) return st;
  if (auto st = check_buffer(block_buf, count, 1, dtype, block_name); !st.is_ok()) return st;
  if (rank_ != root) return Status::ok();
  const std::string on_root = std::string(root_name) + " (on the root)";
  if (auto st = check_buffer(root_buf, count, size_t(size_), dtype, on_root.c_str()); !st.is_ok())
    return st;
  size_t block = count * chorus_dtype_size(dtype);
  const void* own = static_cast<const std::byte*>(root_buf) + size_t(root) * block;
  if (block_buf != own && overlaps(block_buf, block, root_buf, block * size_t(size_)))
    return bad_overlap(what, std::string("on the root the ") + block_name + " may be " +
                                 (root_name[0] == 'o' ? "out" : "in") +
                                 " + root*count (in place) and must otherwise lie outside the " +
                                 root_name);
  return Status::ok();
}

Status Communicator::check_all_to_all(const void* in, const void* out, size_t count,
                                      int dtype) const {
  if (auto st = check_buffer(in, count, size_t(size_), dtype, "input"); !st.is_ok()) return st;
  if (auto st = check_buffer(out, count, size_t(size_), dtype, "output"); !st.is_ok()) return st;
  size_t bytes = count * chorus_dtype_size(dtype) * size_t(size_);
  if (in != out && overlaps(in, bytes, out, bytes))
    return bad_overlap("all_to_all", "they must be the same buffer (in place) or disjoint");
  return Status::ok();
}

Status Communicator::check_all_to_allv(const void* in, const size_t* send_counts,
                                       const size_t* send_offsets, const void* out,
                                       const size_t* recv_counts, const size_t* recv_offsets,
                                       int dtype) const {
  if (auto st = check_dtype(dtype); !st.is_ok()) return st;
  if (!send_counts || !send_offsets || !recv_counts || !recv_offsets)
    return {CHORUS_ERR_INVALID_ARGUMENT,
            "all_to_allv: send_counts, send_offsets, recv_counts and recv_offsets must each point "
            "to " +
                std::to_string(size_) + " entries (one per rank); one of them is NULL"};
  const size_t esize = chorus_dtype_size(dtype);
  const size_t max_elems = std::numeric_limits<size_t>::max() / esize;
  // Extent of each side in elements; every block must be addressable.
  auto extent = [&](const char* side, const size_t* counts, const size_t* offsets, const void* buf,
                    size_t& end) -> Status {
    end = 0;
    for (int p = 0; p < size_; ++p) {
      size_t c = counts[p], o = offsets[p];
      if (c == 0) continue;
      if (c > max_elems || o > max_elems - c)
        return {CHORUS_ERR_INVALID_ARGUMENT,
                std::string("all_to_allv: ") + side + "_offsets[" + std::to_string(p) + "] + " +
                    side + "_counts[" + std::to_string(p) + "] (" + std::to_string(o) + " + " +
                    std::to_string(c) + " elements of " + chorus_dtype_name(dtype) +
                    ") overflows the addressable size"};
      end = std::max(end, o + c);
    }
    if (end > 0 && buf == nullptr)
      return {CHORUS_ERR_INVALID_ARGUMENT, std::string("all_to_allv: ") +
                                               (side[0] == 's' ? "input" : "output") +
                                               " is NULL with non-zero " + side + "_counts"};
    return Status::ok();
  };
  size_t in_end = 0, out_end = 0;
  if (auto st = extent("send", send_counts, send_offsets, in, in_end); !st.is_ok()) return st;
  if (auto st = extent("recv", recv_counts, recv_offsets, out, out_end); !st.is_ok()) return st;
  if (send_counts[rank_] != recv_counts[rank_])
    return {CHORUS_ERR_INVALID_ARGUMENT,
            "all_to_allv: send_counts[" + std::to_string(rank_) +
                "] = " + std::to_string(send_counts[rank_]) + " but recv_counts[" +
                std::to_string(rank_) + "] = " + std::to_string(recv_counts[rank_]) + " on rank " +
                std::to_string(rank_) + "; what a rank sends itself it receives"};
  // Received blocks must be disjoint: two peers writing one place race.
  std::vector<std::pair<size_t, int>> blocks;
  for (int p = 0; p < size_; ++p)
    if (recv_counts[p] > 0) blocks.emplace_back(recv_offsets[p], p);
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    int a = blocks[i - 1].second, b = blocks[i].second;
    if (recv_offsets[a] + recv_counts[a] > recv_offsets[b])
      return {CHORUS_ERR_INVALID_ARGUMENT, "all_to_allv: the receive blocks of ranks " +
                                               std::to_string(a) + " and " + std::to_string(b) +
                                               " overlap in the output (recv_offsets/recv_counts)"};
  }
  if (overlaps(in, in_end * esize, out, out_end * esize))
    return bad_overlap("all_to_allv", "all_to_allv has no in-place form; use separate buffers");
  return Status::ok();
}

// ---------------------------------------------------------------------------
// Counters

std::atomic<uint64_t>* Communicator::algo_counter(int collective, const char* algo) {
  std::string key = std::string(chorus_collective_name(collective)) + "." + algo;
  for (auto& [name, value] : algo_ops_)
    if (name == key) return value.get();
  return nullptr;
}

std::vector<std::pair<std::string, uint64_t>> Communicator::counters() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  uint64_t bs = 0, ms = 0, br = 0, mr = 0;
  for (int p = 0; p < size_ && peer_counters_; ++p) {
    const PeerCounters& c = peer_counters_[size_t(p)];
    bs += get(c.bytes_sent), ms += get(c.msgs_sent), br += get(c.bytes_recv),
        mr += get(c.msgs_recv);
  }
  out.emplace_back("bytes_sent", bs);
  out.emplace_back("messages_sent", ms);
  out.emplace_back("bytes_received", br);
  out.emplace_back("messages_received", mr);
  for (const auto& [name, value] : algo_ops_) out.emplace_back("ops." + name, get(*value));
  out.emplace_back("ops.send", get(send_ops_));
  out.emplace_back("ops.recv", get(recv_ops_));
  out.emplace_back("ops.inline", get(inline_ops_));
  out.emplace_back("ops.queued", get(queued_ops_));
  out.emplace_back("requests.issued", get(requests_issued_));
  out.emplace_back("requests.cancelled", get(requests_cancelled_));
  out.emplace_back("wait.transport_ns", get(transport_wait_ns_));
  out.emplace_back("wait.request_ns", get(*request_wait_ns_));
  out.emplace_back("retries", get(retries_));
  out.emplace_back("errors", get(errors_));
  for (const auto& [name, peers] : auto_peer_counts_)
    out.emplace_back("transport.auto." + name + "_peers", peers);
  for (int p = 0; p < size_ && peer_counters_; ++p) {
    if (p == rank_) continue;
    const PeerCounters& c = peer_counters_[size_t(p)];
    std::string base = "peer." + std::to_string(p) + ".";
    out.emplace_back(base + "bytes_sent", get(c.bytes_sent));
    out.emplace_back(base + "messages_sent", get(c.msgs_sent));
    out.emplace_back(base + "bytes_received", get(c.bytes_recv));
    out.emplace_back(base + "messages_received", get(c.msgs_recv));
  }
  return out;
}

// ---------------------------------------------------------------------------
// split

Status Communicator::init_child(const Config& cfg, int rank, int size, std::string id,
                                std::vector<std::byte>& blob_out) {
  cfg_ = cfg;
  cfg_.rank = rank;
  cfg_.world_size = size;
  rank_ = rank;
  size_ = size;
  id_ = std::move(id);
  LogCommScope log_scope(&id_);
  auto tp = load_transport();
  if (!tp.is_ok()) return tp.status().with_context(who());
  transport_ = *tp;
  tp_ = transport_->transport();
  if (auto st = select_algorithms(); !st.is_ok()) return st;
  if (auto st = open_context(); !st.is_ok()) return st;
  return open_endpoints(blob_out);
}

namespace {

/// Variable-size all-gather over a communicator's fixed-size one: sizes
/// first, then every blob padded to the largest.
Status gather_blobs(Communicator& comm, const std::vector<std::byte>& mine,
                    std::vector<std::vector<std::byte>>& all) {
  uint64_t my_size = mine.size();
  std::vector<uint64_t> sizes(size_t(comm.size()));
  if (auto st = comm.all_gather(&my_size, sizes.data(), 1, CHORUS_UINT64); !st.is_ok()) return st;
  uint64_t max = 1;
  for (uint64_t v : sizes) max = std::max(max, v);
  std::vector<std::byte> padded(max);
  std::copy(mine.begin(), mine.end(), padded.begin());
  std::vector<std::byte> gathered(size_t(max) * size_t(comm.size()));
  if (auto st = comm.all_gather(padded.data(), gathered.data(), size_t(max), CHORUS_UINT8);
      !st.is_ok())
    return st;
  all.assign(size_t(comm.size()), {});
  for (int r = 0; r < comm.size(); ++r) {
    auto* b = gathered.data() + size_t(r) * size_t(max);
    all[size_t(r)].assign(b, b + sizes[size_t(r)]);
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Communicator>> Communicator::split(int color, int key) {
  const uint64_t split_no = splits_++;
  // 1. Who goes where: every rank learns every (color, key).
  int32_t mine[2] = {color < 0 ? -1 : color, key};
  std::vector<int32_t> all_ck(size_t(size_) * 2);
  if (auto st = all_gather(mine, all_ck.data(), 2, CHORUS_INT32); !st.is_ok())
    return st.with_context("split");
  std::vector<int> members;  // parent ranks of this rank's child, in child order
  if (color >= 0) {
    for (int r = 0; r < size_; ++r)
      if (all_ck[size_t(r) * 2] == color) members.push_back(r);
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return all_ck[size_t(a) * 2 + 1] < all_ck[size_t(b) * 2 + 1];
    });
  }
  int child_rank = -1;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i] == rank_) child_rank = int(i);

  // 2. The child opens its context and endpoints locally. A failure here is
  //    not returned yet: every rank must still take part in the exchanges
  //    below, or the others would wait for it until their deadline.
  std::unique_ptr<Communicator> child;
  Status local;
  std::vector<std::byte> blob;
  if (color >= 0) {
    child.reset(new Communicator());
    local = child->init_child(cfg_, child_rank, int(members.size()),
                              id_ + ".s" + std::to_string(split_no) + "c" + std::to_string(color),
                              blob);
    if (!local.is_ok()) blob.clear();
  }
  // 3. Exchange the address tables over this communicator; each child keeps
  //    its members' tables in child-rank order.
  std::vector<std::vector<std::byte>> tables;
  if (auto st = gather_blobs(*this, blob, tables); !st.is_ok())
    return st.with_context("split: exchanging the child's endpoint addresses");
  if (local.is_ok() && child) {
    std::vector<std::vector<std::byte>> child_tables;
    for (int r : members) {
      if (tables[size_t(r)].empty()) {
        local = {CHORUS_ERR_PEER_LOST, who() + ": split: rank " + std::to_string(r) +
                                           " could not set up its part of the new communicator"};
        break;
      }
      child_tables.push_back(std::move(tables[size_t(r)]));
    }
    Deadline deadline = Deadline::after(seconds_ms(cfg_.timeout_init_s));
    if (local.is_ok()) local = child->connect_from(child_tables, deadline);
    if (local.is_ok()) local = child->setup_staging();
  }
  // 4. Agree: the split succeeds only if it succeeded everywhere.
  int32_t ok = local.is_ok() ? 1 : 0;
  if (auto st = all_reduce(&ok, &ok, 1, CHORUS_INT32, CHORUS_MIN); !st.is_ok())
    return st.with_context("split: agreeing on the outcome");
  if (!local.is_ok()) return local;
  if (!ok)
    return Status{CHORUS_ERR_PEER_LOST, who() +
                                            ": split: another rank failed to set up its new "
                                            "communicator (see that rank's error)"};
  if (child)
    child->log(CHORUS_LOG_INFO, "split from comm " + id_ + ": rank " + std::to_string(child_rank) +
                                    " of " + std::to_string(members.size()) + " (color " +
                                    std::to_string(color) + ", key " + std::to_string(key) + ")");
  return child;
}

}  // namespace chorus::core
