#include "device_file.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace jaccl::detail {
namespace {

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw std::runtime_error("[jaccl] device file '" + path + "': " + what);
}

}  // namespace

DeviceMatrix read_device_file(const char* path_cstr) {
  if (!path_cstr || !*path_cstr) throw std::runtime_error("[jaccl] device file: no path given");
  const std::string path = path_cstr;
  std::ifstream in(path);
  if (!in) bad_file(path, std::string("cannot open: ") + std::strerror(errno));

  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    bad_file(path, std::string("not valid JSON: ") + e.what());
  }
  if (!doc.is_array())
    bad_file(path,
             "expected an array with one entry per rank, e.g. [[null, \"rdma_en2\"], "
             "[\"rdma_en2\", null]]");

  const size_t n = doc.size();
  DeviceMatrix devices(n);
  for (size_t i = 0; i < n; ++i) {
    const auto& row = doc[i];
    if (!row.is_array())
      bad_file(path, "entry " + std::to_string(i) + " is not an array of per-peer devices");
    if (row.size() != n)
      bad_file(path, "rank " + std::to_string(i) + " lists " + std::to_string(row.size()) +
                         " peers but the file has " + std::to_string(n) +
                         " ranks; every rank needs one entry per rank (null for itself)");
    devices[i].resize(n);
    for (size_t j = 0; j < n; ++j) {
      const auto& cell = row[j];
      const std::string where = "[" + std::to_string(i) + "][" + std::to_string(j) + "]";
      if (cell.is_null()) continue;
      if (cell.is_string()) {
        devices[i][j].push_back(cell.get<std::string>());
      } else if (cell.is_array()) {
        for (const auto& name : cell) {
          if (!name.is_string()) bad_file(path, "entry " + where + " has a non-string device name");
          devices[i][j].push_back(name.get<std::string>());
        }
      } else {
        bad_file(path, "entry " + where + " must be null, a device name or an array of names");
      }
    }
  }
  return devices;
}

}  // namespace jaccl::detail
