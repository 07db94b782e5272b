// Suggestions for misspelt names: edit distance and "did you mean".
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace chorus::core {

/// Optimal-string-alignment distance (insert, delete, substitute, swap of two
/// neighbours each cost 1), case-sensitive. Stops counting at `cap` + 1.
std::size_t edit_distance(std::string_view a, std::string_view b, std::size_t cap = 3);

/// The candidates within edit distance 2 of `word`, nearest first (ties keep
/// the candidates' order); `word` itself is never suggested.
std::vector<std::string> near_names(std::string_view word,
                                    const std::vector<std::string>& candidates);

/// " (did you mean 'x'?)" or " (did you mean 'x' or 'y'?)", or "" when nothing is near.
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

/// "a, b, c", or `none` for an empty list.
std::string join_names(const std::vector<std::string>& names, std::string_view none = "none");

/// The X of every regular file or symlink "<prefix>X<suffix>" in `dirs`,
/// sorted, without duplicates (a folder that cannot be read is skipped).
std::vector<std::string> names_in_folders(const std::vector<std::string>& dirs,
                                          std::string_view prefix, std::string_view suffix);

}  // namespace chorus::core
