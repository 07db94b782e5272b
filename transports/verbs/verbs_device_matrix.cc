#include "verbs_device_matrix.h"

#include "verbs.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

namespace chorus::verbs {

DeviceMatrix DeviceMatrix::load(const std::string& path, const std::string& origin, int size) {
  const std::string what = "devices_file '" + path + "' (from " + origin + ")";
  std::ifstream in(path);
  if (!in) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, what + ": cannot open: " + errno_text(errno));
  }
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, what + ": not valid JSON: " + e.what());
  }
  auto bad = [&](const std::string& why) {
    return Error(CHORUS_ERR_INVALID_ARGUMENT,
                 what + ": " + why +
                     " (expected a square array of arrays whose entries are null, a device "
                     "name or an array of names, e.g. [[null, \"rxe0\"], [\"rxe0\", null]])");
  };
  if (!doc.is_array()) throw bad("the top level is not an array");
  const std::size_t n = doc.size();
  if (n != static_cast<std::size_t>(size)) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                what + ": has " + std::to_string(n) + " rows but the communicator has " +
                    std::to_string(size) + " ranks; use one row per rank");
  }
  DeviceMatrix m;
  m.path_ = path;
  m.rows_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto& row = doc[i];
    if (!row.is_array() || row.size() != n) {
      throw bad("row " + std::to_string(i) + " is not an array of " + std::to_string(n) +
                " entries");
    }
    m.rows_[i].resize(n);
    for (std::size_t j = 0; j < n; ++j) {
      const auto& e = row[j];
      auto& names = m.rows_[i][j];
      const std::string where = "devices[" + std::to_string(i) + "][" + std::to_string(j) + "]";
      if (e.is_null()) continue;
      if (e.is_string()) {
        names.push_back(e.get<std::string>());
      } else if (e.is_array()) {
        for (const auto& name : e) {
          if (!name.is_string()) throw bad(where + " holds something that is not a device name");
          names.push_back(name.get<std::string>());
        }
      } else {
        throw bad(where + " is neither null, a name nor an array of names");
      }
      for (const auto& name : names) {
        if (name.empty()) throw bad(where + " holds an empty device name");
      }
      if (i == j && !names.empty()) throw bad(where + " (a rank toward itself) must be null");
    }
  }
  return m;
}

std::vector<std::string> DeviceMatrix::names_used_by(int rank) const {
  std::vector<std::string> out;
  for (const auto& entry : rows_.at(static_cast<std::size_t>(rank))) {
    for (const auto& name : entry) {
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
    }
  }
  return out;
}

}  // namespace chorus::verbs
