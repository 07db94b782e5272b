// OutputStream: one of chorusrun's own output descriptors.
#pragma once

#include <string_view>

namespace chorus::run {

/// Writes to chorusrun's stdout or stderr. Only the launcher's single event
/// loop writes, and always in whole lines, so lines of different ranks never
/// interleave. Blocking: a slow reader of chorusrun's output slows the ranks
/// down through their pipes rather than growing chorusrun's memory.
class OutputStream {
 public:
  explicit OutputStream(int fd) : fd_(fd) {}

  /// Writes all of `text`, retrying short writes. Once the reader is gone
  /// (EPIPE) or the descriptor fails, later text is discarded: the ranks must
  /// still be drained so that they do not block on full pipes.
  void write(std::string_view text);

  bool broken() const { return broken_; }

 private:
  int fd_;
  bool broken_ = false;
};

}  // namespace chorus::run
