// Algorithm selection: the transport plugin to load, the algorithm plugin
// for each collective (pinned, or `auto` among every algorithm it can load),
// the choice per call by size, and the init fingerprint that every rank must
// share.

#include "core/communicator.h"

#include <chorus/chorus.h>

#include "core/auto_transport.h"
#include "core/log.h"
#include "core/suggest.h"

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <set>

namespace chorus::core {

namespace {

constexpr const char* kBuiltinAlgorithms[] = {"ring", "mesh"};

}  // namespace

Result<std::shared_ptr<Plugin>> Communicator::load_transport() const {
  if (cfg_.transport == kAutoTransportName) return auto_transport_plugin();
  return load_plugin(PluginKind::kTransport, cfg_.transport, plugin_search_path(cfg_.plugin_path));
}

Status Communicator::check_algorithm_settings(const std::vector<std::string>& search) const {
  // algorithm.<plugin>.<key> for a plugin that is neither loaded nor on the
  // plugin path is a typo: CHORUS_ALGORITHM_ALL_REDUS reads as plugin "all",
  // key "redus", which nothing would ever read. A setting for an installed
  // plugin this communicator happens not to use stays allowed (one config
  // file for several jobs).
  for (const auto& [name, settings] : cfg_.algorithm_settings) {
    if (settings.empty()) continue;
    bool known = false;
    for (const auto& p : algorithms_) known = known || p->name() == name;
    for (const auto& dir : search)
      known =
          known ||
          ::access((dir + "/" + plugin_file_name(PluginKind::kAlgorithm, name)).c_str(), F_OK) == 0;
    if (known) continue;
    const Setting& s = settings.front();
    std::vector<std::string> keys;
    for (int c = 0; c < CHORUS_COLL_COUNT; ++c)
      keys.push_back(std::string("algorithm.") + chorus_collective_name(c));
    for (const auto& p : algorithms_) keys.push_back("algorithm." + p->name() + "." + s.key);
    const std::string key = "algorithm." + name + "." + s.key;
    std::string hint = did_you_mean(key, keys);
    // "all_redus" is closer to "all_reduce" than "all.redus" looks.
    if (hint.empty()) hint = did_you_mean("algorithm." + name + "_" + s.key, keys);
    return {CHORUS_ERR_INVALID_ARGUMENT,
            "setting '" + key + "' (set by " + s.origin + ") is for algorithm plugin '" + name +
                "', which is not installed (no " + plugin_file_name(PluginKind::kAlgorithm, name) +
                " on the plugin path)" + hint +
                "; fix the key, install the plugin, or remove the setting"};
  }
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
  // Pinned plugins must load; a built-in or a plugin found on the path that
  // does not is left out of `auto` (a broken third-party file is worth a
  // warning, a missing built-in only a debug line).
  enum class Source { kPinned, kBuiltin, kFound };
  auto add = [&](const std::string& name, Source source) -> Status {
    for (const auto& p : algorithms_)
      if (p->name() == name) return Status::ok();
    auto loaded = load_plugin(PluginKind::kAlgorithm, name, search);
    if (!loaded.is_ok()) {
      if (source == Source::kPinned)
        return loaded.status().with_context("rank " + std::to_string(rank_));
      if (source == Source::kBuiltin)
        CHORUS_LOGF(
            CHORUS_LOG_DEBUG, rank_,
            "built-in algorithm '" << name << "' not available: " << loaded.status().message());
      else
        CHORUS_LOGF(CHORUS_LOG_WARN, rank_,
                    "algorithm plugin '" << name << "' on the plugin path is left out of auto: "
                                         << loaded.status().message()
                                         << "; fix or remove the file to silence this");
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
    if (auto st = add(name, Source::kPinned); !st.is_ok()) return st;
  // `auto` weighs every algorithm it can load: the built-ins first, then each
  // plugin on the path by name. The order is the tie-break (choose_plugin()).
  if (any_auto) {
    for (const char* name : kBuiltinAlgorithms)
      if (auto st = add(name, Source::kBuiltin); !st.is_ok()) return st;
    for (const auto& name : plugin_names(PluginKind::kAlgorithm, search))
      if (auto st = add(name, Source::kFound); !st.is_ok()) return st;
  }
  if (auto st = check_algorithm_settings(search); !st.is_ok()) return st;

  for (int coll = 0; coll < CHORUS_COLL_COUNT; ++coll) {
    const std::string& want = cfg_.algorithm[coll];
    std::string key = std::string("algorithm.") + chorus_collective_name(coll);
    for (size_t i = 0; i < algorithms_.size(); ++i) {
      const Plugin& p = *algorithms_[i];
      if (want != "auto" && p.name() != want) continue;
      constexpr uint32_t kReproducible =
          CHORUS_ALGO_DETERMINISTIC_ACROSS_RANKS | CHORUS_ALGO_DETERMINISTIC_ACROSS_RUNS;
      if (want == "auto" && cfg_.deterministic &&
          (p.algorithm_flags() & kReproducible) != kReproducible)
        continue;
      if (p.implements(coll)) {
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
  select_data_peers();
  return Status::ok();
}

void Communicator::select_data_peers() {
  // The data endpoints are the union of what every algorithm that may run
  // here declares. The untagged send/recv path (point_to_point.tagged =
  // false) posts on data channel 0 to any peer, so it needs them all.
  std::set<std::string> ring, all;
  for (const auto& list : candidates_)
    for (const Plugin* p : list)
      (p->algorithm_peers() == CHORUS_ALGO_PEERS_RING ? ring : all).insert(p->name());
  const auto names = [](const std::set<std::string>& set) {
    std::string s;
    for (const auto& n : set) s += (s.empty() ? "'" : ", '") + n + "'";
    return s;
  };
  // Untagged point-to-point without the engine posts on data channel 0 to
  // any peer; a lane runs no point-to-point at all.
  const bool ring_only = all.empty() && (cfg_.p2p_tagged || cfg_.is_lane);
  data_peers_ = DataPeers(ring_only ? CHORUS_ALGO_PEERS_RING : CHORUS_ALGO_PEERS_ALL, size_);
  if (ring_only)
    data_peers_why_ = "every algorithm that may run on this communicator (" + names(ring) +
                      ") declares CHORUS_ALGO_PEERS_RING";
  else if (!all.empty())
    data_peers_why_ = "algorithm(s) " + names(all) + " declare CHORUS_ALGO_PEERS_ALL";
  else
    data_peers_why_ = "point_to_point.tagged = false sends on the data endpoints to any peer";
}

std::string Communicator::undeclared_peer_text(int peer) const {
  const std::string algo =
      call_algo_.empty() ? "the running call" : "algorithm '" + call_algo_ + "'";
  if (data_peers_.links(rank_, peer))  // opened, left for first use (data_connect.cc)
    return algo + " posted to rank " + std::to_string(peer) +
           ", which is not a ring neighbour of rank " + std::to_string(rank_) +
           ", but it declares CHORUS_ALGO_PEERS_RING: the data endpoints to other ranks are "
           "connected only for a call whose algorithm declares CHORUS_ALGO_PEERS_ALL. Declare "
           "CHORUS_ALGO_PEERS_ALL in " +
           (call_algo_.empty() ? std::string("the algorithm") : "'" + call_algo_ + "'") +
           " (the peers field of its table; kPeers in an SDK class) if it talks to other ranks, "
           "or post only to rank-1 and rank+1";
  return algo + " posted to rank " + std::to_string(peer) +
         ", but this communicator has no data endpoint to rank " + std::to_string(peer) + ": " +
         data_peers_why_ + ", so rank " + std::to_string(rank_) + " connects only " +
         data_peers_.describe(rank_) + ". Declare CHORUS_ALGO_PEERS_ALL in " +
         (call_algo_.empty() ? std::string("the algorithm") : "'" + call_algo_ + "'") +
         " (the peers field of its table; kPeers in an SDK class) if it talks to other ranks, "
         "or post only to rank-1 and rank+1";
}

bool Communicator::plugin_supports(size_t index, const chorus_algo_call_v2_t& call) const {
  const auto* a = algorithms_[index]->algorithm_v2();
  if (!a || !a->supports) return true;
  return a->supports(algo_state_[index], call.collective, call.dtype, call.op) != 0;
}

size_t Communicator::algorithm_index(const Plugin* p) const {
  size_t i = 0;
  while (i < algorithms_.size() && algorithms_[i].get() != p) ++i;
  return i;
}

int Communicator::preference_of(const Plugin* p, const chorus_algo_call_v2_t& call,
                                uint64_t probe) const {
  if (const auto* a2 = p->algorithm_v2()) {
    const size_t i = algorithm_index(p);
    if (!plugin_supports(i, call)) return -1;
    if (!a2->preference) return 0;
    chorus_algo_call_v2_t probed = call;
    probed.bytes = probe;
    return a2->preference(algo_state_[i], &probed);
  }
  const auto* a = p->algorithm();
  bool has_pref =
      a->struct_size >= offsetof(chorus_algorithm_plugin_v1_t, preference) + sizeof(void*) &&
      a->preference != nullptr;
  return has_pref ? a->preference(call.collective, size_, probe) : 0;
}

chorus_algo_call_v2_t Communicator::query_call(int collective, uint64_t bytes) {
  // chorus_comm_algorithm names no dtype or op: it answers for float32 sum
  // (docs/plugins.md), the common case of a reducing collective.
  chorus_algo_call_v2_t call{};
  call.struct_size = sizeof(call);
  call.collective = collective;
  const bool reduces = collective == CHORUS_COLL_ALL_REDUCE ||
                       collective == CHORUS_COLL_REDUCE_SCATTER || collective == CHORUS_COLL_REDUCE;
  call.dtype = collective == CHORUS_COLL_BARRIER ? -1 : CHORUS_FLOAT32;
  call.op = reduces ? CHORUS_SUM : -1;
  call.root = -1;
  call.count = bytes / 4;
  call.bytes = bytes;
  return call;
}

const Plugin* Communicator::choose_plugin(const chorus_algo_call_v2_t& call) const {
  const int collective = call.collective;
  const uint64_t bytes = call.bytes;
  if (collective < 0 || collective >= CHORUS_COLL_COUNT) return nullptr;
  const auto& list = candidates_[collective];
  if (list.empty()) return nullptr;
  if (list.size() == 1) return list.front();
  // With algorithm.switch_bytes set, the plugins' preferences only decide which
  // candidate is the latency one (best for 1 byte) and which the bandwidth one
  // (best for 1 GiB); the configured size picks between those two.
  uint64_t probe = bytes;
  if (cfg_.switch_bytes > 0) probe = bytes < cfg_.switch_bytes ? 1 : (1ull << 30);
  // The highest preference wins; a tie goes to the earlier candidate (the
  // built-ins, then plugins by name); a negative answer means "never", and so
  // does a v2 plugin's refusal of the call's (dtype, op).
  const Plugin* best = nullptr;
  int best_score = std::numeric_limits<int>::min();
  for (const Plugin* p : list) {
    const int score = preference_of(p, call, probe);
    if (score >= 0 && score > best_score) {
      best_score = score;
      best = p;
    }
  }
  // Nobody wants it: the first candidate that supports it, else the first
  // (whose refusal then names the reason).
  if (!best) {
    for (const Plugin* p : list)
      if (!best && plugin_supports(algorithm_index(p), call)) best = p;
    if (!best) best = list.front();
  }
  // Once per (collective, size class): sizes in [2^(k-1), 2^k) share class k.
  // The text is built only then, off the per-call path.
  const int size_class = bytes == 0 ? 0 : std::min(63, 64 - __builtin_clzll(bytes));
  const uint64_t bit = uint64_t(1) << size_class;
  if (log_enabled(CHORUS_LOG_INFO) &&
      !(choice_logged_[size_t(collective)].fetch_or(bit, std::memory_order_relaxed) & bit)) {
    std::string scores;
    for (const Plugin* p : list)
      scores += (scores.empty() ? "" : ", ") + p->name() + " " +
                std::to_string(preference_of(p, call, probe));
    log(CHORUS_LOG_INFO, std::string("auto: ") + chorus_collective_name(collective) + " of " +
                             std::to_string(bytes) + " bytes (size class " +
                             std::to_string(size_class) + ") runs '" + best->name() +
                             "' (preferences: " + scores + ")");
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
                  " check_signatures=" + std::to_string(cfg_.check_signatures) +
                  " p2p_tagged=" + std::to_string(cfg_.p2p_tagged) +
                  " lanes=" + std::to_string(cfg_.lanes) +
                  " data_peers=" + (data_peers_.ring() ? "ring" : "all");
  for (int c = 0; c < CHORUS_COLL_COUNT; ++c) {
    f += std::string(" ") + chorus_collective_name(c) + "=" + cfg_.algorithm[c];
    for (const Plugin* p : candidates_[c])
      f += (p == candidates_[c].front() ? ":" : ",") + p->name();
  }
  return f;
}

}  // namespace chorus::core
