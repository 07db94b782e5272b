// The tagged engine's work-request ids and wire constants, shared by
// p2p_engine.cc (protocol, matching) and p2p_engine_peers.cc (failures,
// finalize). Private to the core.
#pragma once

#include <bit>
#include <cstdint>

namespace chorus::core::p2p_wire {

static_assert(std::endian::native == std::endian::little, "the p2p header is little-endian");

inline constexpr uint16_t kMagic = 0x7032;  // "2p"
// wr_id: lane in the top byte, then a flag for a control send carrying an
// eager send's data, then a slot or buffer index.
inline constexpr uint64_t kLaneCtrlRecv = 1, kLaneCtrlSend = 2, kLaneBulkSend = 3,
                          kLaneBulkRecv = 4;
inline constexpr uint64_t kCarriesOp = 1ull << 48;
inline constexpr uint64_t kByeIndex = 0xffffffff;  // a control send of the goodbye header
inline constexpr int32_t kOrderedTag = -2;         // the wire tag of chorus_send/recv
inline constexpr uint64_t wr(uint64_t lane, uint64_t index) { return (lane << 56) | index; }
inline constexpr uint64_t lane_of(uint64_t wr_id) { return wr_id >> 56; }

}  // namespace chorus::core::p2p_wire
