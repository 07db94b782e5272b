// Edit distance and "did you mean" text for configuration and plugin names.
#include "core/suggest.h"

#include <dirent.h>

#include <algorithm>
#include <numeric>

namespace chorus::core {

std::size_t edit_distance(std::string_view a, std::string_view b, std::size_t cap) {
  const std::size_t n = a.size(), m = b.size();
  if ((n > m ? n - m : m - n) > cap) return cap + 1;
  // Three rows: the one before the previous is needed for transpositions.
  std::vector<std::size_t> two(m + 1), prev(m + 1), cur(m + 1);
  std::iota(prev.begin(), prev.end(), std::size_t{0});
  for (std::size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    std::size_t row_min = cur[0];
    for (std::size_t j = 1; j <= m; ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        cur[j] = std::min(cur[j], two[j - 2] + 1);
      row_min = std::min(row_min, cur[j]);
    }
    if (row_min > cap) return cap + 1;
    std::swap(two, prev);
    std::swap(prev, cur);
  }
  return std::min(prev[m], cap + 1);
}

std::vector<std::string> near_names(std::string_view word,
                                    const std::vector<std::string>& candidates) {
  std::vector<std::pair<std::size_t, std::size_t>> hits;  // (distance, index)
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i] == word) continue;
    const std::size_t d = edit_distance(word, candidates[i], 2);
    if (d <= 2) hits.emplace_back(d, i);
  }
  std::stable_sort(hits.begin(), hits.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<std::string> out;
  for (const auto& [d, i] : hits)
    if (std::find(out.begin(), out.end(), candidates[i]) == out.end()) out.push_back(candidates[i]);
  return out;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  auto near = near_names(word, candidates);
  if (near.empty()) return "";
  std::string out = " (did you mean '" + near[0] + "'";
  if (near.size() > 1) out += " or '" + near[1] + "'";
  return out + "?)";
}

std::string join_names(const std::vector<std::string>& names, std::string_view none) {
  if (names.empty()) return std::string(none);
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::vector<std::string> names_in_folders(const std::vector<std::string>& dirs,
                                          std::string_view prefix, std::string_view suffix) {
  std::vector<std::string> out;
  for (const auto& dir : dirs) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) continue;
    while (const dirent* ent = ::readdir(d)) {
      std::string_view file = ent->d_name;
      if (file.size() <= prefix.size() + suffix.size() || !file.starts_with(prefix) ||
          !file.ends_with(suffix))
        continue;
      out.emplace_back(file.substr(prefix.size(), file.size() - prefix.size() - suffix.size()));
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace chorus::core
