// channel_name: how this transport's messages name an endpoint's channel.
#pragma once

#include <chorus/transport.h>

#include <cstddef>
#include <string>

namespace chorus::verbs {

/// The number of data channels the core stated in `info` (ABI minor 3), or 0
/// when its struct_size does not cover the field (an older core): unknown.
inline int data_channels_of(const chorus_tp_context_info_t& info) {
  return info.struct_size >= offsetof(chorus_tp_context_info_t, data_channels) + sizeof(int)
             ? info.data_channels
             : 0;
}

/// "channel 1" for a data channel. Channel indexes at or past `data_channels`
/// are the core's peer-loss notice endpoint, which is no channel the user
/// configured: "notice channel". With `data_channels` 0 (unknown) every
/// channel is a data channel.
inline std::string channel_name(int channel, int data_channels) {
  if (data_channels > 0 && channel >= data_channels) return "notice channel";
  return "channel " + std::to_string(channel);
}

/// "rank 2 (channel 1)", or "rank 2 (notice channel)".
inline std::string endpoint_name(int peer_rank, int channel, int data_channels) {
  return "rank " + std::to_string(peer_rank) + " (" + channel_name(channel, data_channels) + ")";
}

}  // namespace chorus::verbs
