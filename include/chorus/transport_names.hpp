/**
 * @file transport_names.hpp
 * Header-only C++ helpers for transport plugins (and the core's composite
 * transport): how messages name an endpoint's channel. Besides the data
 * channels a communicator configures, the core opens one more endpoint per
 * peer, at channel index `data_channels` (chorus_tp_context_info_t, ABI
 * minor 3): its peer-loss notice endpoint (docs/reliability.md §4.3). A
 * message about that endpoint should not name a "channel N" the user never
 * configured.
 */
#pragma once

#include <chorus/transport.h>

#include <cstddef>
#include <string>

namespace chorus {

/// The number of data channels the core stated in `info`, or 0 when its
/// struct_size does not cover the field (a core older than minor 3): unknown,
/// every channel is then named as a data channel. Call it in context_open
/// (the info is valid only there) and keep the value.
inline int data_channels_of(const chorus_tp_context_info_t& info) {
  return info.struct_size >= offsetof(chorus_tp_context_info_t, data_channels) + sizeof(int)
             ? info.data_channels
             : 0;
}

/// "channel 1" for a data channel; "notice channel" for a channel index at
/// or past `data_channels` (0: unknown).
inline std::string channel_name(int channel, int data_channels) {
  if (data_channels > 0 && channel == data_channels + 1) return "point-to-point control channel";
  if (data_channels > 0 && channel == data_channels + 2) return "point-to-point data channel";
  if (data_channels > 0 && channel >= data_channels) return "notice channel";
  return "channel " + std::to_string(channel);
}

/// "rank 2 (channel 1)", or "rank 2 (notice channel)".
inline std::string endpoint_name(int peer_rank, int channel, int data_channels) {
  return "rank " + std::to_string(peer_rank) + " (" + channel_name(channel, data_channels) + ")";
}

}  // namespace chorus
