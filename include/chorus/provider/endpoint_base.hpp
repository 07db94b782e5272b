// chorus::provider::EndpointBase: what every transport endpoint is from
// endpoint_open on, its context, peer rank and channel. Part of the provider
// toolkit (docs/transport-abi.md).
#pragma once

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
