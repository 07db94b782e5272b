// jaccl::init: turns a JACCL configuration (or none) into chorus_comm_init
// options, and is_available.
#include <jaccl/jaccl.h>

#include <chorus/chorus.h>

#include "chorus_group.h"
#include "environment.h"
#include "rendezvous.h"
#include "transport_choice.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace jaccl {
namespace {

/// What to hand chorus_comm_init. Unset fields (-1, empty) leave the value to
/// Chorus's own sources: config file, CHORUS_* variables.
struct JoinPlan {
  int rank = -1;
  int size = -1;
  std::string coordinator;
  std::vector<std::string> settings;
  /// The transport chosen for the device matrix; empty: the configuration's.
  std::string transport;
};

/// A ring topology has no links between non-neighbours, so every collective
/// must run as a ring; Chorus's "auto" could pick an algorithm that needs them.
void pin_ring(std::vector<std::string>& settings) {
  for (int c = 0; c < CHORUS_COLL_COUNT; ++c)
    settings.push_back(std::string("algorithm.") + chorus_collective_name(c) + "=\"ring\"");
}

/// No group can be made from this configuration: JACCL returns nullptr unless
/// strict, in which case it throws.
std::shared_ptr<Group> unusable(bool strict, const std::string& why) {
  if (!strict) return nullptr;
  throw std::runtime_error("[jaccl] init: " + why);
}

std::shared_ptr<Group> join(const JoinPlan& plan, bool strict) {
  std::string transport_name = plan.transport;
  if (transport_name.empty()) {
    detail::configured_transport_origin(&transport_name);
    if (transport_name.empty()) transport_name = "tcp";
  }
  chorus_options_t opts;
  chorus_options_init(&opts);
  opts.rank = plan.rank;
  opts.size = plan.size;
  opts.coordinator = plan.coordinator.empty() ? nullptr : plan.coordinator.c_str();
  std::vector<const char*> settings;
  settings.reserve(plan.settings.size());
  for (const auto& s : plan.settings) settings.push_back(s.c_str());
  opts.settings = settings.data();
  opts.settings_count = settings.size();

  chorus_comm_t* comm = nullptr;
  const int status = chorus_comm_init(&opts, &comm);
  if (status != CHORUS_OK) {
    const std::string why = std::string(chorus_status_name(status)) + ": " + chorus_last_error();
    // A configuration Chorus rejects or a transport it cannot load is "not
    // available" in JACCL's sense; a failure while joining is an error.
    if (status == CHORUS_ERR_INVALID_ARGUMENT || status == CHORUS_ERR_UNAVAILABLE)
      return unusable(strict, why);
    throw std::runtime_error("[jaccl] init: " + why);
  }
  auto group = std::make_shared<detail::ChorusGroup>(comm);
  group->set_transport(transport_name);
  return group;
}

std::string why_invalid(const Config& cfg) {
  if (cfg.get_size() == 0)
    return "no device matrix: set one with Config::set_devices or JACCL_IBV_DEVICES";
  if (cfg.get_size() < 2)
    return "the device matrix has " + std::to_string(cfg.get_size()) +
           " rank; JACCL needs at least 2 (run without JACCL_* variables for a group of one)";
  if (cfg.get_rank() < 0 || cfg.get_rank() >= cfg.get_size())
    return "rank " + std::to_string(cfg.get_rank()) + " is out of range for the " +
           std::to_string(cfg.get_size()) + " ranks of the device matrix";
  return "the device matrix is neither a mesh (every pair of ranks linked, the diagonal empty) "
         "nor a ring (each rank linked to both neighbours by the same number of devices)";
}

}  // namespace

bool is_available() {
  // Chorus's own question, asked of the same configuration init would read:
  // the transport's plugin loads and finds something to use here. A JACCL
  // job with a device file runs over verbs unless the configuration names a
  // transport, so that is the transport asked about.
  const detail::JacclEnvironment env = detail::read_environment();
  if (env.devices && detail::configured_transport_origin().empty()) {
    const char* settings[] = {"transport.name=\"verbs\""};
    chorus_options_t opts;
    chorus_options_init(&opts);
    opts.settings = settings;
    opts.settings_count = 1;
    return chorus_transport_probe(&opts) == CHORUS_OK;
  }
  return chorus_transport_probe(nullptr) == CHORUS_OK;
}

std::shared_ptr<Group> init(const Config& cfg, bool strict) {
  if (!cfg.is_valid()) return unusable(strict, why_invalid(cfg));

  JoinPlan plan;
  plan.rank = cfg.rank_;
  plan.size = cfg.size_;
  plan.coordinator = cfg.coordinator_;
  // JACCL's choice: a preferred and valid ring, else a mesh, else a ring.
  if ((cfg.prefer_ring_ && cfg.is_valid_ring()) || !cfg.is_valid_mesh()) pin_ring(plan.settings);

  if (plan.coordinator.empty()) {
    AllGatherFn all_gather = cfg.all_gather_fn_;
    if (!all_gather && cfg.all_gather_factory_)
      all_gather = cfg.all_gather_factory_(cfg.rank_, cfg.size_);
    if (!all_gather)
      return unusable(strict,
                      "no coordinator: set one with Config::set_coordinator or JACCL_COORDINATOR "
                      "(host:port where rank 0 listens), or give an all-gather side channel");
    const detail::Rendezvous rv = detail::rendezvous_over(all_gather, cfg.rank_, cfg.size_);
    plan.coordinator = rv.coordinator;
    plan.settings.push_back("bootstrap.job_token=\"" + rv.job_token + "\"");
  }
  // The matrix picks verbs and its wires unless the configuration names a
  // transport; the temporary device file lives until the join is done.
  const detail::TransportChoice transport = detail::choose_transport(cfg.devices_, cfg.rank_);
  plan.settings.insert(plan.settings.end(), transport.settings.begin(), transport.settings.end());
  plan.transport = transport.transport;
  detail::log_info(cfg.rank_, transport.reason);
  return join(plan, strict);
}

std::shared_ptr<Group> init(bool strict, std::function<AllGatherFn(int, int)> factory) {
  const detail::JacclEnvironment env = detail::read_environment();
  if (!env.names_a_job()) {
    // Nothing JACCL-specific: rank, size and coordinator come from Chorus's
    // own sources, so `chorusrun -n 4 prog` works as it does for any host.
    JoinPlan plan;
    if (env.ring) pin_ring(plan.settings);
    return join(plan, strict);
  }

  std::string missing;
  auto need = [&](const detail::EnvValue& v, const char* names) {
    if (!v) missing += std::string(missing.empty() ? "" : ", ") + names;
  };
  need(env.rank, "a rank (JACCL_RANK or MLX_RANK)");
  need(env.devices, "a device file (JACCL_IBV_DEVICES or MLX_IBV_DEVICES)");
  if (!factory)
    need(env.coordinator, "a coordinator host:port (JACCL_COORDINATOR or MLX_JACCL_COORDINATOR)");
  if (!missing.empty())
    return unusable(strict, "the environment names a JACCL job but lacks " + missing +
                                " (or set none of them to use Chorus's CHORUS_* settings)");

  Config cfg = Config::from_env();
  if (factory) cfg.set_all_gather_factory(std::move(factory));
  return init(cfg, strict);
}

std::shared_ptr<Group> init(bool strict) { return init(strict, nullptr); }

}  // namespace jaccl
