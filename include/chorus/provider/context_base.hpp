// chorus::provider::ContextBase: what every transport context learns from
// chorus_tp_context_info_t at context_open (its rank, the communicator's
// size, the data channel count), checked once, and endpoint_open's argument
// checks that follow from it. Part of the provider toolkit
// (docs/transport-abi.md).
#pragma once

#include <chorus/transport.h>
#include <chorus/provider/completion_queue.hpp>
#include <chorus/provider/error.hpp>

#include <algorithm>
#include <cstddef>

namespace chorus::provider {

/// A transport's context class derives from it. Neither copyable nor
/// movable (a context's handle is its address). Immutable after
/// construction, so any thread may read it.
class ContextBase {
 public:
  /// Throws Error(INVALID_ARGUMENT) when `info.struct_size` is smaller than
  /// ABI minor 0's info or the rank is outside [0, size).
  explicit ContextBase(const chorus_tp_context_info_t& info);
  ContextBase(const ContextBase&) = delete;
  ContextBase& operator=(const ContextBase&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// chorus_tp_context_info_t::data_channels (0: unknown); see chorus/transport_names.hpp.
  int data_channels() const { return data_channels_; }

 protected:
  ~ContextBase() = default;

  /// endpoint_open's checks that need no transport state: the address buffer
  /// and its length are not NULL, `peer_rank` is another rank of the
  /// communicator, `channel` is not negative. Throws Error(INVALID_ARGUMENT).
  void check_endpoint_open(int peer_rank, int channel, const void* address_out,
                           const std::size_t* address_len) const;
  /// The error endpoint_open throws when the context already has an
  /// endpoint to `peer_rank` on `channel`.
  Error already_open(int peer_rank, int channel) const;
  /// The position of `ep` among the endpoints a context owns (a container of
  /// owning pointers); throws Error(INVALID_ARGUMENT, "endpoint_close:
  /// unknown endpoint") when it is not there.
  template <class Owned, class Endpoint>
  static auto owned_endpoint(Owned& endpoints, const Endpoint* ep) {
    auto it = std::find_if(endpoints.begin(), endpoints.end(),
                           [ep](const auto& p) { return p.get() == ep; });
    if (it == endpoints.end())
      throw Error(CHORUS_ERR_INVALID_ARGUMENT, "endpoint_close: unknown endpoint");
    return it;
  }

 private:
  int rank_;
  int size_;
  int data_channels_;
};

/// A ContextBase that also holds what every built-in context keeps beside
/// it: its settings, parsed from context_open's table by
/// `Config::parse(entries, count)` before anything else is set up (so a
/// wrong key is reported even where the fabric is missing), and its
/// completion queue. The caller thread owns both (the ABI's one caller at a
/// time).
template <class Config>
class ConfiguredContext : public ContextBase {
 public:
  /// Throws what ContextBase and Config::parse throw.
  explicit ConfiguredContext(const chorus_tp_context_info_t& info)
      : ContextBase(info), cfg_(Config::parse(info.config, info.config_count)) {}

  const Config& config() const { return cfg_; }
  CompletionQueue& cq() { return cq_; }

 protected:
  ~ConfiguredContext() = default;

  Config cfg_;
  CompletionQueue cq_;
};

}  // namespace chorus::provider
