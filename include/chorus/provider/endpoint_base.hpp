// chorus::provider::EndpointBase: what every transport endpoint is from
// endpoint_open on, its context, peer rank and channel. Part of the provider
// toolkit (docs/transport-abi.md).
#pragma once

#include <chorus/transport.h>

#include <cstdint>

namespace chorus::provider {

/// A transport's endpoint class derives from EndpointBase<its Context>
/// (which may still be incomplete there). Neither copyable nor movable: an
/// endpoint's handle is its address. The three values never change, so the
/// transport's own code reads the members directly.
template <class Context>
class EndpointBase {
 public:
  EndpointBase(Context& ctx, int peer_rank, int channel)
      : ctx_(ctx), peer_rank_(peer_rank), channel_(channel) {}
  EndpointBase(const EndpointBase&) = delete;
  EndpointBase& operator=(const EndpointBase&) = delete;

  /// Posts an endpoint takes per direction before post_send/post_recv return
  /// AGAIN: a power of two, so a ring of that many slots wraps with a mask.
  static constexpr std::uint32_t kMaxOutstanding = 1024;

  /// The ABI handle, for a transport whose `struct chorus_tp_endpoint`
  /// derives from its endpoint class (and so from this one).
  template <class Handle = chorus_tp_endpoint>
  Handle* handle() {
    return static_cast<Handle*>(this);
  }

  /// The context that opened the endpoint; it outlives the endpoint.
  Context& context() const { return ctx_; }
  int peer_rank() const { return peer_rank_; }
  int channel() const { return channel_; }

 protected:
  ~EndpointBase() = default;

  Context& ctx_;
  const int peer_rank_;
  const int channel_;
};

}  // namespace chorus::provider
