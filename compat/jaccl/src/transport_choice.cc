#include "transport_choice.h"

#include <chorus/chorus.h>

#include <dirent.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace jaccl::detail {
namespace {

/// `key`'s value and origin in Chorus's configuration (no job options).
/// Throws when the configuration itself is rejected, with Chorus's reason.
bool config_get(const char* key, std::string& value, std::string& origin) {
  char v[4096], o[1024];
  const int st = chorus_config_get(nullptr, key, v, sizeof v, o, sizeof o);
  if (st != CHORUS_OK) return false;
  value = v;
  origin = o;
  return true;
}

std::string unquote(std::string s) {
  if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front())
    return s.substr(1, s.size() - 2);
  return s;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string matrix_json(const DeviceMatrix& devices) {
  std::string out = "[";
  for (size_t i = 0; i < devices.size(); ++i) {
    out += i ? ",\n [" : "[";
    for (size_t j = 0; j < devices[i].size(); ++j) {
      if (j) out += ", ";
      const auto& names = devices[i][j];
      if (names.empty()) {
        out += "null";
        continue;
      }
      out += "[";
      for (size_t k = 0; k < names.size(); ++k) out += (k ? ", " : "") + json_string(names[k]);
      out += "]";
    }
    out += "]";
  }
  return out + "]\n";
}

std::string write_temp(const std::string& text) {
  const char* dir = std::getenv("TMPDIR");
  std::string path = std::string(dir && *dir ? dir : "/tmp") + "/jaccl-devices-XXXXXX";
  std::vector<char> buf(path.begin(), path.end());
  buf.push_back('\0');
  const int fd = mkstemp(buf.data());
  if (fd < 0)
    throw std::runtime_error("[jaccl] init: cannot create " + path +
                             " for the verbs transport's device matrix");
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      ::close(fd);
      ::unlink(buf.data());
      throw std::runtime_error("[jaccl] init: cannot write the device matrix to " +
                               std::string(buf.data()));
    }
    done += size_t(n);
  }
  ::close(fd);
  return buf.data();
}

std::string join_names(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

TransportChoice::TransportChoice(TransportChoice&& other) noexcept
    : settings(std::move(other.settings)),
      devices_file(std::move(other.devices_file)),
      reason(std::move(other.reason)),
      transport(std::move(other.transport)) {
  other.devices_file.clear();
}

TransportChoice::~TransportChoice() {
  if (!devices_file.empty()) ::unlink(devices_file.c_str());
}

int wires_per_link(const DeviceMatrix& devices) {
  size_t most = 1;
  for (const auto& row : devices)
    for (const auto& names : row) most = std::max(most, names.size());
  return int(most);
}

std::vector<std::string> rdma_devices_here() {
  std::vector<std::string> names;
  if (DIR* d = opendir("/sys/class/infiniband")) {
    while (const dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string configured_transport_origin(std::string* name) {
  std::string value, origin;
  if (!config_get("transport.name", value, origin)) return "";
  if (name) *name = unquote(value);
  return origin;
}

TransportChoice choose_transport(const DeviceMatrix& devices, int rank) {
  TransportChoice choice;
  const int size = int(devices.size());

  std::string ws, ws_origin;
  if (config_get("bootstrap.world_size", ws, ws_origin) && !ws_origin.empty() &&
      ws != std::to_string(size))
    throw std::runtime_error("[jaccl] init: the device matrix has " + std::to_string(size) +
                             " ranks but the job has " + ws + " (" + ws_origin +
                             "); give every rank a row, or start " + std::to_string(size) +
                             " ranks");

  std::string configured;
  const std::string origin = configured_transport_origin(&configured);
  if (!origin.empty()) {
    choice.transport = configured;
    choice.reason = "[jaccl] transport '" + configured + "' (" + origin +
                    ") wins over the device matrix; its device names are not used";
    return choice;
  }

  // The matrix selects verbs: every device in this rank's row must exist.
  const std::vector<std::string> here = rdma_devices_here();
  for (size_t peer = 0; peer < devices[size_t(rank)].size(); ++peer)
    for (const auto& name : devices[size_t(rank)][peer])
      if (std::find(here.begin(), here.end(), name) == here.end())
        throw std::runtime_error("[jaccl] init: device '" + name + "' (row " +
                                 std::to_string(rank) + ", toward rank " + std::to_string(peer) +
                                 " of the device matrix) does not exist on this host; RDMA "
                                 "devices here: " +
                                 join_names(here) +
                                 " (or name another transport: CHORUS_TRANSPORT=tcp, or "
                                 "transport.name in Chorus's config file)");

  const int wires = wires_per_link(devices);
  choice.transport = "verbs";
  choice.devices_file = write_temp(matrix_json(devices));
  choice.settings.push_back("transport.name=\"verbs\"");
  choice.settings.push_back("transport.verbs.devices_file=" + json_string(choice.devices_file));
  std::string ch, ch_origin;
  const bool channels_set = config_get("algorithm.channels", ch, ch_origin) && !ch_origin.empty();
  if (!channels_set) choice.settings.push_back("algorithm.channels=" + std::to_string(wires));
  choice.reason =
      "[jaccl] transport 'verbs': the device matrix names RDMA devices and the "
      "configuration names no transport; " +
      (channels_set ? "algorithm.channels " + ch + " (" + ch_origin + ")"
                    : std::to_string(wires) + " channel" + (wires == 1 ? "" : "s") +
                          " per neighbour (wires per link in the matrix)");
  return choice;
}

void log_info(int rank, const std::string& line) {
  std::string level, origin;
  if (!config_get("log.level", level, origin)) return;
  level = unquote(level);
  for (char& c : level) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (level != "info" && level != "debug" && level != "trace") return;
  std::fprintf(stderr, "[chorus r%d INFO] %s\n", rank, line.c_str());
}

}  // namespace jaccl::detail
