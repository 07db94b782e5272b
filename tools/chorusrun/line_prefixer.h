// LinePrefixer: turns one rank's byte stream into whole, prefixed lines.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace chorus::run {

/// Splits one child stream (a rank's stdout or stderr) into lines and puts
/// `prefix` in front of each.
///
/// Pure: it does no I/O, so the event loop decides where and when the text
/// is written. Invariant: everything it appends to `out` is a sequence of
/// complete lines, each ending in '\n'. That is what lets the single-threaded
/// launcher write several ranks' output to one descriptor without a line of
/// one rank ever being cut by another's.
class LinePrefixer {
 public:
  /// A line longer than this is emitted in pieces of this size, each ended
  /// with '\n', so a rank writing without newlines cannot grow memory without
  /// bound.
  static constexpr std::size_t kDefaultMaxLine = std::size_t{1} << 20;

  explicit LinePrefixer(std::string prefix, std::size_t max_line = kDefaultMaxLine);

  /// Appends to `out` every line that `data` completes; keeps the unfinished
  /// tail until a later feed() or finish().
  void feed(std::string_view data, std::string& out);

  /// End of stream: appends the unfinished tail, if any, with a '\n' added.
  void finish(std::string& out);

  bool has_partial_line() const { return !partial_.empty(); }

 private:
  void emit(std::string_view tail, std::string& out);

  std::string prefix_;
  std::string partial_;
  std::size_t max_line_;
};

}  // namespace chorus::run
