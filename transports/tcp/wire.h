// Wire formats of the TCP transport: data frames, the connection handshake
// and the address blob. All integers are little-endian on the wire; every
// decoder checks magic, version and bounds before a value is used.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace chorus::tcp::wire {

// ---- byte order ---------------------------------------------------------

template <class T>
constexpr T byteswap_if_big(T v) {
  static_assert(std::is_integral_v<T>);
  if constexpr (std::endian::native == std::endian::little || sizeof(T) == 1) {
    return v;
  } else if constexpr (sizeof(T) == 2) {
    return static_cast<T>(__builtin_bswap16(static_cast<std::uint16_t>(v)));
  } else if constexpr (sizeof(T) == 4) {
    return static_cast<T>(__builtin_bswap32(static_cast<std::uint32_t>(v)));
  } else {
    return static_cast<T>(__builtin_bswap64(static_cast<std::uint64_t>(v)));
  }
}

template <class T>
inline void store(std::byte* p, T v) {
  v = byteswap_if_big(v);
  std::memcpy(p, &v, sizeof v);
}

template <class T>
inline T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return byteswap_if_big(v);
}

// ---- data frames --------------------------------------------------------
//
// Every message starts with one 24-byte header on socket 0:
//   u32 magic "CHRF" | u8 kind=1 | u8 stripes | u16 index=0 | u32 seq |
//   u32 reserved=0 | u64 length (whole message)
// followed by the bytes of part 0. A message striped over n > 1 sockets also
// carries, on each socket i in 1..n-1 and in message order, a header of
// kind=2 with index=i, the same seq and stripes, and length = size of part i,
// followed by that part. Part geometry is stripe_part() on both sides.

inline constexpr std::uint32_t kFrameMagic = 0x46524843;  // "CHRF"
inline constexpr std::size_t kFrameHeaderSize = 24;
using FrameBytes = std::array<std::byte, kFrameHeaderSize>;

enum class FrameKind : std::uint8_t { kMessage = 1, kStripe = 2 };

struct FrameHeader {
  FrameKind kind = FrameKind::kMessage;
  std::uint8_t stripes = 1;
  std::uint16_t index = 0;
  std::uint32_t seq = 0;
  std::uint64_t length = 0;
};

inline void encode(const FrameHeader& h, FrameBytes& out) {
  std::byte* p = out.data();
  store<std::uint32_t>(p + 0, kFrameMagic);
  store<std::uint8_t>(p + 4, static_cast<std::uint8_t>(h.kind));
  store<std::uint8_t>(p + 5, h.stripes);
  store<std::uint16_t>(p + 6, h.index);
  store<std::uint32_t>(p + 8, h.seq);
  store<std::uint32_t>(p + 12, 0);
  store<std::uint64_t>(p + 16, h.length);
}

/// False when the magic, kind or reserved field is wrong: the stream is not
/// ours or is corrupt.
inline bool decode(const FrameBytes& in, FrameHeader& h) {
  const std::byte* p = in.data();
  if (load<std::uint32_t>(p + 0) != kFrameMagic || load<std::uint32_t>(p + 12) != 0) return false;
  const auto kind = load<std::uint8_t>(p + 4);
  if (kind != static_cast<std::uint8_t>(FrameKind::kMessage) &&
      kind != static_cast<std::uint8_t>(FrameKind::kStripe)) {
    return false;
  }
  h.kind = static_cast<FrameKind>(kind);
  h.stripes = load<std::uint8_t>(p + 5);
  h.index = load<std::uint16_t>(p + 6);
  h.seq = load<std::uint32_t>(p + 8);
  h.length = load<std::uint64_t>(p + 16);
  return true;
}

/// Messages at least this long are striped when an endpoint has several sockets.
inline constexpr std::uint64_t kStripeMinBytes = std::uint64_t{512} << 10;
inline constexpr std::uint64_t kStripeAlign = 4096;
/// Largest message the transport accepts (advertised as max_message_size).
inline constexpr std::uint64_t kMaxMessageSize = std::uint64_t{1} << 40;

inline unsigned stripes_for(std::uint64_t length, int sockets) {
  return length >= kStripeMinBytes ? static_cast<unsigned>(sockets) : 1u;
}

struct Part {
  std::uint64_t begin = 0;
  std::uint64_t size = 0;
};

/// Bytes [begin, begin+size) of a `length`-byte message that travel on
/// socket `index` when striped `stripes` ways: equal, 4 KiB-aligned slices;
/// trailing slices may be empty.
inline Part stripe_part(std::uint64_t length, unsigned stripes, unsigned index) {
  if (stripes <= 1) return {0, length};
  std::uint64_t per = (length + stripes - 1) / stripes;
  per = (per + kStripeAlign - 1) / kStripeAlign * kStripeAlign;
  const std::uint64_t begin = std::min<std::uint64_t>(length, per * index);
  const std::uint64_t end = std::min<std::uint64_t>(length, begin + per);
  return {begin, end - begin};
}

// ---- connection handshake -----------------------------------------------
//
// The connecting (higher) rank sends one Hello per socket; the accepting
// rank answers with one Ack. A connection whose Hello is malformed, late or
// names no open endpoint is dropped and logged.
//   Hello (40 B): u32 magic "CHRH" | u16 version | u16 sockets | i32 rank |
//                 i32 peer_rank | i32 channel | u16 index | u16 reserved=0 |
//                 u64 target_nonce (from the acceptor's blob) |
//                 u64 sender_nonce (from the connector's own blob)
//   Ack   (8 B):  u32 magic "CHRA" | u32 AckStatus

inline constexpr std::uint32_t kHelloMagic = 0x48524843;  // "CHRH"
inline constexpr std::uint32_t kAckMagic = 0x41524843;    // "CHRA"
inline constexpr std::uint16_t kProtocolVersion = 1;
inline constexpr std::size_t kHelloSize = 40;
inline constexpr std::size_t kAckSize = 8;
using HelloBytes = std::array<std::byte, kHelloSize>;
using AckBytes = std::array<std::byte, kAckSize>;

struct Hello {
  std::uint16_t sockets = 1;
  std::int32_t rank = 0;       ///< the connecting rank
  std::int32_t peer_rank = 0;  ///< the accepting rank
  std::int32_t channel = 0;
  std::uint16_t index = 0;  ///< which of the endpoint's sockets this is
  std::uint64_t target_nonce = 0;
  std::uint64_t sender_nonce = 0;
};

enum class AckStatus : std::uint32_t {
  kAccepted = 0,
  kUnknownEndpoint = 1,  ///< no open endpoint has that nonce/rank/channel
  kMismatch = 2,         ///< socket count differs between the two ranks
  kDuplicate = 3,        ///< this socket index already arrived
};

inline void encode(const Hello& h, HelloBytes& out) {
  std::byte* p = out.data();
  store<std::uint32_t>(p + 0, kHelloMagic);
  store<std::uint16_t>(p + 4, kProtocolVersion);
  store<std::uint16_t>(p + 6, h.sockets);
  store<std::int32_t>(p + 8, h.rank);
  store<std::int32_t>(p + 12, h.peer_rank);
  store<std::int32_t>(p + 16, h.channel);
  store<std::uint16_t>(p + 20, h.index);
  store<std::uint16_t>(p + 22, 0);
  store<std::uint64_t>(p + 24, h.target_nonce);
  store<std::uint64_t>(p + 32, h.sender_nonce);
}

/// False on wrong magic, version or reserved bits.
inline bool decode(const HelloBytes& in, Hello& h) {
  const std::byte* p = in.data();
  if (load<std::uint32_t>(p + 0) != kHelloMagic || load<std::uint16_t>(p + 4) != kProtocolVersion ||
      load<std::uint16_t>(p + 22) != 0) {
    return false;
  }
  h.sockets = load<std::uint16_t>(p + 6);
  h.rank = load<std::int32_t>(p + 8);
  h.peer_rank = load<std::int32_t>(p + 12);
  h.channel = load<std::int32_t>(p + 16);
  h.index = load<std::uint16_t>(p + 20);
  h.target_nonce = load<std::uint64_t>(p + 24);
  h.sender_nonce = load<std::uint64_t>(p + 32);
  return true;
}

inline void encode(AckStatus s, AckBytes& out) {
  store<std::uint32_t>(out.data() + 0, kAckMagic);
  store<std::uint32_t>(out.data() + 4, static_cast<std::uint32_t>(s));
}

inline bool decode(const AckBytes& in, AckStatus& s) {
  if (load<std::uint32_t>(in.data()) != kAckMagic) return false;
  s = static_cast<AckStatus>(load<std::uint32_t>(in.data() + 4));
  return true;
}

// ---- address blob ---------------------------------------------------------
//
// What endpoint_open hands the core for the peer (48 B):
//   u32 magic "CHRB" | u16 version | u16 sockets | i32 rank (owner) |
//   i32 peer_rank | i32 channel | u16 port | u8 family (4|6) | u8 reserved=0 |
//   u8 address[16] (IPv4 in the first 4 bytes) | u64 nonce

inline constexpr std::uint32_t kBlobMagic = 0x42524843;  // "CHRB"
inline constexpr std::size_t kBlobSize = 48;
/// Advertised as max_address_size; leaves room for growth within major 1.
inline constexpr std::size_t kMaxBlobSize = 64;

struct Blob {
  std::uint16_t sockets = 1;
  std::int32_t rank = 0;
  std::int32_t peer_rank = 0;
  std::int32_t channel = 0;
  std::uint16_t port = 0;
  std::uint8_t family = 4;
  std::array<std::uint8_t, 16> address{};
  std::uint64_t nonce = 0;
};

inline void encode(const Blob& b, std::byte* out /* kBlobSize bytes */) {
  store<std::uint32_t>(out + 0, kBlobMagic);
  store<std::uint16_t>(out + 4, kProtocolVersion);
  store<std::uint16_t>(out + 6, b.sockets);
  store<std::int32_t>(out + 8, b.rank);
  store<std::int32_t>(out + 12, b.peer_rank);
  store<std::int32_t>(out + 16, b.channel);
  store<std::uint16_t>(out + 20, b.port);
  store<std::uint8_t>(out + 22, b.family);
  store<std::uint8_t>(out + 23, 0);
  std::memcpy(out + 24, b.address.data(), b.address.size());
  store<std::uint64_t>(out + 40, b.nonce);
}

/// False unless `length` is kBlobSize and magic, version and family are valid.
inline bool decode(const void* in, std::size_t length, Blob& b) {
  if (in == nullptr || length != kBlobSize) return false;
  const auto* p = static_cast<const std::byte*>(in);
  if (load<std::uint32_t>(p + 0) != kBlobMagic || load<std::uint16_t>(p + 4) != kProtocolVersion) {
    return false;
  }
  b.sockets = load<std::uint16_t>(p + 6);
  b.rank = load<std::int32_t>(p + 8);
  b.peer_rank = load<std::int32_t>(p + 12);
  b.channel = load<std::int32_t>(p + 16);
  b.port = load<std::uint16_t>(p + 20);
  b.family = load<std::uint8_t>(p + 22);
  std::memcpy(b.address.data(), p + 24, b.address.size());
  b.nonce = load<std::uint64_t>(p + 40);
  return (b.family == 4 || b.family == 6) && b.port != 0;
}

}  // namespace chorus::tcp::wire
