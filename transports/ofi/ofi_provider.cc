#include "ofi_provider.h"

#include "ofi.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <vector>

namespace chorus::ofi {

namespace {

/// Serialises setenv and fi_getinfo calls of this plugin (libfabric's own
/// initialisation is not documented as thread-safe before fi_getinfo returns).
std::mutex g_getinfo_mutex;
bool g_libfabric_initialised = false;
/// The process whose fi_getinfo initialised libfabric; another pid means this
/// process was forked from it afterwards (and inherited its state).
pid_t g_initialised_by = 0;

constexpr std::uint64_t kCaps = FI_TAGGED | FI_SEND | FI_RECV;
constexpr std::uint64_t kModes = FI_CONTEXT | FI_CONTEXT2;
constexpr int kMrModes =
    FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;

/// One requirement of the full hint set, applied on top of the previous ones,
/// so a refusal can be pinned on the first that does not fit.
struct Requirement {
  const char* what;
  void (*apply)(fi_info*);
};

const Requirement kRequirements[] = {
    {"reliable datagram endpoints (FI_EP_RDM)", [](fi_info* h) { h->ep_attr->type = FI_EP_RDM; }},
    {"tagged messages (FI_TAGGED)", [](fi_info* h) { h->caps = kCaps; }},
    {"send-after-send ordering (FI_ORDER_SAS)",
     [](fi_info* h) {
       h->tx_attr->msg_order = FI_ORDER_SAS;
       h->rx_attr->msg_order = FI_ORDER_SAS;
     }},
    {"no mode bits beyond FI_CONTEXT/FI_CONTEXT2", [](fi_info* h) { h->mode = kModes; }},
    {"an mr_mode within FI_MR_LOCAL|FI_MR_VIRT_ADDR|FI_MR_ALLOCATED|FI_MR_PROV_KEY|FI_MR_ENDPOINT",
     [](fi_info* h) { h->domain_attr->mr_mode = kMrModes; }},
    {"FI_THREAD_DOMAIN threading",
     [](fi_info* h) { h->domain_attr->threading = FI_THREAD_DOMAIN; }},
};

FiInfoPtr alloc_hints() {
  FiInfoPtr h(fi_allocinfo());
  if (!h) throw Error(CHORUS_ERR_SYSTEM, "fi_allocinfo: out of memory");
  // With no mode bits set, a provider that needs any is filtered out; with
  // the full set we say which we handle.
  h->mode = ~std::uint64_t{0};
  h->domain_attr->mr_mode = ~0 & ~(FI_MR_BASIC | FI_MR_SCALABLE);
  return h;
}

FiInfoPtr full_hints(const Config& cfg) {
  FiInfoPtr h = alloc_hints();
  for (const Requirement& r : kRequirements) r.apply(h.get());
  if (!cfg.provider.empty()) h->fabric_attr->prov_name = ::strdup(cfg.provider.c_str());
  if (!cfg.domain.empty()) h->domain_attr->name = ::strdup(cfg.domain.c_str());
  return h;
}

/// fi_getinfo under the plugin's lock; marks libfabric initialised.
int getinfo(const char* node, std::uint64_t flags, const fi_info* hints, FiInfoPtr& out) {
  std::lock_guard lock(g_getinfo_mutex);
  fi_info* info = nullptr;
  const int rc = fi_getinfo(kApiVersion, node, nullptr, flags, hints, &info);
  g_libfabric_initialised = true;
  if (g_initialised_by == 0) g_initialised_by = ::getpid();
  out.reset(rc == 0 ? info : nullptr);
  if (rc != 0 && info != nullptr) fi_freeinfo(info);
  return rc;
}

std::string version_text(std::uint32_t v) {
  return std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
}

std::string libfabric_text() {
  const std::uint32_t v = fi_version();
  return "libfabric " + version_text(v);
}

/// Provider names (with versions and domains) in an fi_info list, in order.
std::string list_providers(const fi_info* list, bool with_domains) {
  std::vector<std::string> order;
  std::map<std::string, std::set<std::string>> domains;
  for (const fi_info* i = list; i != nullptr; i = i->next) {
    const std::string label = provider_label(*i);
    if (domains.find(label) == domains.end()) order.push_back(label);
    auto& d = domains[label];
    if (i->domain_attr != nullptr && i->domain_attr->name != nullptr)
      d.insert(i->domain_attr->name);
  }
  std::string out;
  for (const auto& label : order) {
    if (!out.empty()) out += ", ";
    out += label;
    if (with_domains && !domains[label].empty()) {
      out += " (domain";
      out += domains[label].size() > 1 ? "s " : " ";
      bool first = true;
      for (const auto& d : domains[label]) {
        out += (first ? "" : ", ") + d;
        first = false;
      }
      out += ")";
    }
  }
  return out;
}

/// Every provider on this machine, RDM or not ("tcp, shm, verbs;ofi_rxm, ...").
std::string all_provider_names() {
  FiInfoPtr list;
  FiInfoPtr hints = alloc_hints();
  if (getinfo(nullptr, 0, hints.get(), list) != 0 || !list) return "(none)";
  return list_providers(list.get(), false);
}

/// Providers that would work with the full hints but any provider name.
std::string usable_provider_names(const Config& cfg) {
  Config any = cfg;
  any.provider.clear();
  any.domain.clear();
  FiInfoPtr hints = full_hints(any);
  FiInfoPtr list;
  if (getinfo(nullptr, 0, hints.get(), list) != 0 || !list) return "(none)";
  return list_providers(list.get(), false);
}

/// Why the configured provider does not fit: it does not exist, or the first
/// requirement it fails.
[[noreturn]] void explain_refusal(const Config& cfg, int rc) {
  const std::string usable = usable_provider_names(cfg);
  const std::string tail = " (" + libfabric_text() + "; providers that fit: " + usable +
                           "; set transport.ofi.provider to one of them)";
  FiInfoPtr hints = alloc_hints();
  hints->fabric_attr->prov_name = ::strdup(cfg.provider.c_str());
  FiInfoPtr list;
  if (getinfo(nullptr, 0, hints.get(), list) != 0 || !list) {
    std::string why = "libfabric has no provider '" + cfg.provider +
                      "' on this machine; providers present: " + all_provider_names();
    if (const char* filter = std::getenv("FI_PROVIDER"); filter != nullptr) {
      why += " (FI_PROVIDER=" + std::string(filter) + " restricts the list)";
    }
    throw Error(CHORUS_ERR_UNAVAILABLE, why + tail);
  }
  for (const Requirement& r : kRequirements) {
    r.apply(hints.get());
    FiInfoPtr got;
    if (getinfo(nullptr, 0, hints.get(), got) != 0) {
      std::string offered;
      if (std::string(r.what).find("FI_EP_RDM") != std::string::npos) {
        std::set<std::string> types;
        for (const fi_info* i = list.get(); i != nullptr; i = i->next)
          types.insert(fi_tostr(&i->ep_attr->type, FI_TYPE_EP_TYPE));
        for (const auto& t : types) offered += (offered.empty() ? "" : ", ") + t;
        offered = "; it offers " + offered;
      }
      throw Error(CHORUS_ERR_UNAVAILABLE, "libfabric provider '" + cfg.provider + "' lacks " +
                                              r.what + ", which the ofi transport needs" + offered +
                                              tail);
    }
  }
  if (!cfg.domain.empty()) {
    Config no_domain = cfg;
    no_domain.domain.clear();
    FiInfoPtr h = full_hints(no_domain);
    FiInfoPtr got;
    std::string domains = "(none)";
    if (getinfo(nullptr, 0, h.get(), got) == 0 && got) domains = list_providers(got.get(), true);
    throw Error(CHORUS_ERR_UNAVAILABLE, "libfabric provider '" + cfg.provider +
                                            "' has no domain '" + cfg.domain + "'; it offers " +
                                            domains);
  }
  throw Error(CHORUS_ERR_UNAVAILABLE,
              "fi_getinfo for provider '" + cfg.provider + "': " + fi_strerror(-rc) + tail);
}

bool is_wildcard(const std::string& address) {
  return address == "0.0.0.0" || address == "::" || address == "*";
}

/// The first IPv4 (else IPv6) address of interface `name`.
std::string interface_address(const std::string& name) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    throw Error(CHORUS_ERR_SYSTEM, "getifaddrs: " + errno_text(errno));
  }
  std::string v4, v6;
  std::set<std::string> names;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name != nullptr) names.insert(a->ifa_name);
    if (a->ifa_addr == nullptr || a->ifa_name == nullptr || name != a->ifa_name) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET && v4.empty()) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text,
                  sizeof text);
      v4 = text;
    } else if (a->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, text,
                  sizeof text);
      v6 = text;
    }
  }
  ::freeifaddrs(list);
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  std::string all;
  for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
  throw Error(CHORUS_ERR_INVALID_ARGUMENT,
              "transport.ofi.interface '" + name + "' has no IP address (interfaces: " + all + ")");
}

}  // namespace

std::string provider_label(const fi_info& info) {
  std::string s = info.fabric_attr != nullptr && info.fabric_attr->prov_name != nullptr
                      ? info.fabric_attr->prov_name
                      : "?";
  if (info.fabric_attr != nullptr) s += " " + version_text(info.fabric_attr->prov_version);
  return s;
}

bool uses_ip_addresses(const fi_info& info) {
  switch (info.addr_format) {
    case FI_SOCKADDR:
    case FI_SOCKADDR_IN:
    case FI_SOCKADDR_IN6:
    case FI_SOCKADDR_IB:
      return true;
    default:
      return false;
  }
}

bool is_verbs_provider(const std::string& name) {
  return name == "verbs" || name.rfind("verbs;", 0) == 0;
}

namespace {

/// One libfabric variable the transport sets for a provider unless the
/// environment or transport.ofi.env already holds it.
struct ProviderDefault {
  std::string name;
  std::string value;
  /// libfabric reads it only when it initialises (the first fi_getinfo of
  /// the process), not at every fi_getinfo.
  bool read_at_load;
  const char* why;
};

std::vector<ProviderDefault> provider_defaults(const Config& cfg, int job_size) {
  std::vector<ProviderDefault> out;
  if (!is_verbs_provider(cfg.provider)) return out;
  // ofi_rxm without a shared receive context reposts a receive buffer to the
  // MSG endpoint that rxm_close_conn() has just closed when a message from
  // that peer is still in rxm's MSG completion queue (endpoint close, or the
  // peer's disconnect): a use-after-free that crashes (libfabric 1.17;
  // tests/softroce/rxm_close_repro.c). With the shared context, buffers go
  // back to the context, which outlives the connections. rxm reads this one
  // at every fi_getinfo.
  out.push_back({"FI_OFI_RXM_USE_SRX", "1", false,
                 "ofi_rxm's per-connection receive buffers are reposted to a closed "
                 "endpoint at connection teardown"});
  // rxm sizes its verbs CQ as srx size + msg tx size x FI_UNIVERSE_SIZE
  // (4096 + 128 x 256 by default), more than small devices allow (rdma_rxe:
  // max_cqe 32767). The job size is what the variable is meant to say;
  // 64 at least, because other contexts of this process may be larger.
  out.push_back({"FI_UNIVERSE_SIZE", std::to_string(std::max(job_size, 64)), true,
                 "rxm sizes its verbs completion queue by it; the default 256 exceeds "
                 "small devices' max_cqe (rdma_rxe: 32767)"});
  return out;
}

}  // namespace

void apply_fi_env(const Config& cfg, int job_size) {
  std::lock_guard lock(g_getinfo_mutex);
  for (std::size_t i = 0; i < cfg.fi_env.size(); ++i) {
    const auto& [name, value] = cfg.fi_env[i];
    const char* current = std::getenv(name.c_str());
    if (current != nullptr && value == current) continue;
    if (g_libfabric_initialised) {
      log(CHORUS_LOG_WARN, "setting " + name + "=" + value + " (from " + cfg.fi_env_origin[i] +
                               ") after libfabric was initialised in this process; providers "
                               "that read it when they load will not see it");
    } else if (current != nullptr) {
      log(CHORUS_LOG_INFO, "setting " + name + "=" + value + " (from " + cfg.fi_env_origin[i] +
                               "), replacing the environment's value '" + current + "'");
    } else {
      log(CHORUS_LOG_DEBUG,
          "setting " + name + "=" + value + " (from " + cfg.fi_env_origin[i] + ")");
    }
    if (::setenv(name.c_str(), value.c_str(), 1) != 0) {
      throw Error(CHORUS_ERR_SYSTEM, "setenv(" + name + "): " + errno_text(errno));
    }
  }
  for (const ProviderDefault& d : provider_defaults(cfg, job_size)) {
    if (const char* current = std::getenv(d.name.c_str()); current != nullptr) {
      log(CHORUS_LOG_DEBUG, cfg.provider + ": keeping " + d.name + "=" + current +
                                " (the transport's default would be " + d.value + ")");
      continue;
    }
    if (d.read_at_load && g_libfabric_initialised) {
      log(CHORUS_LOG_WARN, cfg.provider + ": libfabric was initialised in this process before " +
                               d.name + " could be set to " + d.value + " (" + d.why +
                               "); set it in the job's environment if fi_enable fails");
    } else {
      log(CHORUS_LOG_INFO, cfg.provider + ": setting " + d.name + "=" + d.value + " (" + d.why +
                               "; set it in the environment or transport.ofi.env to override)");
    }
    if (::setenv(d.name.c_str(), d.value.c_str(), 0) != 0) {
      throw Error(CHORUS_ERR_SYSTEM, "setenv(" + d.name + "): " + errno_text(errno));
    }
  }
}

namespace {

/// The first entry of `list` on the configured domain, or the list itself
/// when no domain is configured. Utility providers (ofi_rxm in 1.17) do not
/// filter by the domain name in the hints, so the plugin checks it.
/// `where` says what the list was asked for, for the error. Throws Error.
FiInfoPtr on_configured_domain(FiInfoPtr list, const Config& cfg, const std::string& where) {
  if (cfg.domain.empty()) return list;
  for (const fi_info* i = list.get(); i != nullptr; i = i->next) {
    if (i->domain_attr != nullptr && i->domain_attr->name != nullptr &&
        cfg.domain == i->domain_attr->name) {
      FiInfoPtr one(fi_dupinfo(i));
      if (!one) throw Error(CHORUS_ERR_SYSTEM, "fi_dupinfo: out of memory");
      return one;
    }
  }
  throw Error(CHORUS_ERR_UNAVAILABLE, "libfabric provider '" + cfg.provider + "' has no domain '" +
                                          cfg.domain + "'" + where + "; it offers " +
                                          list_providers(list.get(), true));
}

/// Throws Error(UNAVAILABLE) when `provider` is verbs-based and this process
/// was forked after libfabric had been initialised in its parent: the verbs
/// provider keeps the RDMA device contexts it opened then, and the kernel
/// refuses a child's posts on them (rdma_rxe: every ibv_post_send fails with
/// EACCES, which ofi_rxm turns into an endless -FI_EAGAIN), so connections
/// would come up and never carry a message.
void refuse_verbs_after_fork(const std::string& provider) {
  pid_t initialised_by;
  {
    std::lock_guard lock(g_getinfo_mutex);
    initialised_by = g_initialised_by;
  }
  if (initialised_by == 0 || initialised_by == ::getpid() || !is_verbs_provider(provider)) return;
  throw Error(CHORUS_ERR_UNAVAILABLE,
              "libfabric provider '" + provider + "' cannot be used in process " +
                  std::to_string(::getpid()) + ": it was forked from process " +
                  std::to_string(initialised_by) +
                  " after libfabric had been initialised there, and the verbs provider keeps the "
                  "RDMA device contexts it opened then, which the kernel does not let a child "
                  "post on (rdma_rxe: ibv_post_send fails with EACCES); open the first ofi "
                  "context only after fork, or exec the child");
}

}  // namespace

FiInfoPtr select_provider(const Config& cfg, const std::string& bind_address) {
  refuse_verbs_after_fork(cfg.provider);
  FiInfoPtr hints = full_hints(cfg);
  FiInfoPtr info;
  const int rc = getinfo(nullptr, 0, hints.get(), info);
  if (rc != 0 || !info) explain_refusal(cfg, rc);
  info = on_configured_domain(std::move(info), cfg, "");
  refuse_verbs_after_fork(info->fabric_attr->prov_name);
  if (!uses_ip_addresses(*info)) {
    // shm, efa, psm*: their addresses are not IP addresses; a bind address
    // would be taken as the endpoint's name (shm) or ignored.
    if (!cfg.node.empty() || !cfg.interface.empty()) {
      throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                  "transport.ofi.node/interface: provider '" + provider_label(*info) +
                      "' does not use IP addresses (address format " +
                      fi_tostr(&info->addr_format, FI_TYPE_ADDR_FORMAT) + "); remove the key");
    }
    return info;
  }
  std::string node = !cfg.interface.empty() ? interface_address(cfg.interface)
                     : !cfg.node.empty()    ? cfg.node
                                            : bind_address;
  if (node.empty() || is_wildcard(node)) {
    log(CHORUS_LOG_DEBUG, "no specific bind address; " + provider_label(*info) +
                              " picks its first domain (" + info->domain_attr->name + ")");
    return info;
  }
  FiInfoPtr bound;
  const int brc = getinfo(node.c_str(), FI_SOURCE, hints.get(), bound);
  if (brc != 0 || !bound) {
    std::string domains = list_providers(info.get(), true);
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "libfabric provider '" + cfg.provider + "' has no domain for source address '" +
                    node + "' (fi_getinfo: " + fi_strerror(-brc) + "); it offers " + domains +
                    "; set network.bind_address, transport.ofi.node or transport.ofi.interface "
                    "to an address of one of them");
  }
  return on_configured_domain(std::move(bound), cfg,
                              " for source address '" + node +
                                  "' (set transport.ofi.node or transport.ofi.interface to an "
                                  "address of that domain)");
}

bool describe_providers(std::string& out) {
  Config any;
  any.provider.clear();
  FiInfoPtr hints = full_hints(any);
  FiInfoPtr list;
  const int rc = getinfo(nullptr, 0, hints.get(), list);
  if (rc != 0 || !list) {
    out = libfabric_text() + ": no provider offers FI_EP_RDM with FI_TAGGED and FI_ORDER_SAS (" +
          fi_strerror(-rc) + "); providers present: " + all_provider_names();
    return false;
  }
  out = libfabric_text() + "; providers: " + list_providers(list.get(), true);
  return true;
}

}  // namespace chorus::ofi
