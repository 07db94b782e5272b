// ContextBase's checks of context_open's info and endpoint_open's arguments.
#include <chorus/provider/context_base.hpp>
#include <chorus/transport_names.hpp>

#include <string>

namespace chorus::provider {

namespace {

const chorus_tp_context_info_t& checked(const chorus_tp_context_info_t& info) {
  if (info.struct_size < offsetof(chorus_tp_context_info_t, config_count) + sizeof(size_t)) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "context info struct_size " +
                                                 std::to_string(info.struct_size) +
                                                 " is too small for ABI minor 0");
  }
  if (info.size < 1 || info.rank < 0 || info.rank >= info.size) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "rank " + std::to_string(info.rank) +
                                                 " is out of range for size " +
                                                 std::to_string(info.size));
  }
  return info;
}

}  // namespace

ContextBase::ContextBase(const chorus_tp_context_info_t& info)
    : rank_(checked(info).rank), size_(info.size), data_channels_(data_channels_of(info)) {}

void ContextBase::check_endpoint_open(int peer_rank, int channel, const void* address_out,
                                      const std::size_t* address_len) const {
  if (address_out == nullptr || address_len == nullptr) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "NULL address buffer or length");
  }
  if (peer_rank < 0 || peer_rank >= size_) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "peer rank " + std::to_string(peer_rank) +
                                                 " is out of range for size " +
                                                 std::to_string(size_));
  }
  if (peer_rank == rank_) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "rank " + std::to_string(rank_) + " cannot open an endpoint to itself");
  }
  if (channel < 0) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "channel " + std::to_string(channel) + " is negative");
  }
}

Error ContextBase::already_open(int peer_rank, int channel) const {
  return Error(
      CHORUS_ERR_INVALID_ARGUMENT,
      "an endpoint to " + endpoint_name(peer_rank, channel, data_channels_) + " is already open");
}

}  // namespace chorus::provider
