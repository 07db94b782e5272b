// Wire formats of the TCP transport: data frames, the connection handshake
// and the address blob. All integers are little-endian on the wire; every
// decoder checks magic, version and bounds before a value is used.
#pragma once

#include <chorus/provider/little_endian.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace chorus::tcp::wire {

using provider::little_endian::load;
using provider::little_endian::store;

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
/// ours or is corrupt. Pure: reads exactly kFrameHeaderSize bytes.
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

/// Checks a decoded message header (kind 1, on socket 0) against the
/// receiver's state before anything is sized from it. Returns nullptr when it
/// may be used, else why not. Pure.
inline const char* check_message_header(const FrameHeader& h, std::uint32_t expected_seq,
                                        int sockets) {
  if (h.kind != FrameKind::kMessage || h.index != 0) return "not a message header";
  if (h.seq != expected_seq) return "out of sequence";
  if (h.stripes < 1 || static_cast<int>(h.stripes) > sockets) return "bad stripe count";
  if (h.length > kMaxMessageSize) return "longer than the largest message";
  if (h.stripes > 1 && h.length < kStripeMinBytes) return "striped below the striping threshold";
  return nullptr;
}

/// Checks a decoded stripe header (kind 2, on socket `index` > 0) against the
/// message it belongs to. Pure.
inline bool stripe_header_matches(const FrameHeader& h, unsigned index, std::uint32_t seq,
                                  unsigned stripes, std::uint64_t part_size) {
  return h.kind == FrameKind::kStripe && h.index == index && h.seq == seq && h.stripes == stripes &&
         h.length == part_size;
}

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
/// Never overflows, whatever the arguments (they may come off the wire).
inline Part stripe_part(std::uint64_t length, unsigned stripes, unsigned index) {
  if (stripes <= 1) return {0, length};
  std::uint64_t per = length / stripes + (length % stripes != 0 ? 1 : 0);
  if (const std::uint64_t rem = per % kStripeAlign; rem != 0) {
    per = per > length ? length : per + (kStripeAlign - rem);
  }
  std::uint64_t begin = 0;
  if (__builtin_mul_overflow(per, std::uint64_t{index}, &begin) || begin > length) begin = length;
  const std::uint64_t end = length - begin < per ? length : begin + per;
  return {begin, end - begin};
}

// ---- connection handshake -----------------------------------------------
//
// Per socket, the connecting (higher) rank C and the accepting rank A run a
// mutual challenge-response over the job key (tcp_auth.h), then A admits:
//   C -> A  Hello     (72 B): u32 magic "CHRH" | u16 version | u16 sockets |
//                     i32 rank | i32 peer_rank | i32 channel | u16 index |
//                     u16 reserved=0 | u64 target_nonce (from A's blob) |
//                     u64 sender_nonce (from C's own blob) |
//                     u8[32] connector_nonce (fresh random)
//   A -> C  Challenge (72 B): u32 magic "CHRC" | u32 reserved=0 |
//                     u8[32] acceptor_nonce (fresh) |
//                     u8[32] HMAC(key, "acceptor" label | Hello | acceptor_nonce)
//   C -> A  Proof     (40 B): u32 magic "CHRP" | u32 reserved=0 |
//                     u8[32] HMAC(key, "connector" label | Hello | acceptor_nonce)
//   A -> C  Ack       (8 B):  u32 magic "CHRA" | u32 AckStatus
// C checks A's MAC before it proves anything itself; A says nothing about its
// endpoints (no Ack) to a caller whose proof is wrong. A connection that is
// malformed, late or fails a check is dropped and logged.

inline constexpr std::uint32_t kHelloMagic = 0x48524843;      // "CHRH"
inline constexpr std::uint32_t kChallengeMagic = 0x43524843;  // "CHRC"
inline constexpr std::uint32_t kProofMagic = 0x50524843;      // "CHRP"
inline constexpr std::uint32_t kAckMagic = 0x41524843;        // "CHRA"
/// 2: authenticated handshake (Hello grew the connector nonce).
inline constexpr std::uint16_t kProtocolVersion = 2;
inline constexpr std::size_t kAuthSize = 32;
inline constexpr std::size_t kHelloSize = 72;
inline constexpr std::size_t kChallengeSize = 8 + 2 * kAuthSize;
inline constexpr std::size_t kProofSize = 8 + kAuthSize;
inline constexpr std::size_t kAckSize = 8;
using AuthBytes = std::array<std::byte, kAuthSize>;
using HelloBytes = std::array<std::byte, kHelloSize>;
using ChallengeBytes = std::array<std::byte, kChallengeSize>;
using ProofBytes = std::array<std::byte, kProofSize>;
using AckBytes = std::array<std::byte, kAckSize>;

struct Hello {
  std::uint16_t sockets = 1;
  std::int32_t rank = 0;       ///< the connecting rank
  std::int32_t peer_rank = 0;  ///< the accepting rank
  std::int32_t channel = 0;
  std::uint16_t index = 0;  ///< which of the endpoint's sockets this is
  std::uint64_t target_nonce = 0;
  std::uint64_t sender_nonce = 0;
  AuthBytes connector_nonce{};
};

struct Challenge {
  AuthBytes acceptor_nonce{};
  AuthBytes mac{};
};

struct Proof {
  AuthBytes mac{};
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
  std::memcpy(p + 40, h.connector_nonce.data(), kAuthSize);
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
  std::memcpy(h.connector_nonce.data(), p + 40, kAuthSize);
  return true;
}

inline void encode(const Challenge& c, ChallengeBytes& out) {
  std::byte* p = out.data();
  store<std::uint32_t>(p + 0, kChallengeMagic);
  store<std::uint32_t>(p + 4, 0);
  std::memcpy(p + 8, c.acceptor_nonce.data(), kAuthSize);
  std::memcpy(p + 8 + kAuthSize, c.mac.data(), kAuthSize);
}

/// False on wrong magic or reserved bits.
inline bool decode(const ChallengeBytes& in, Challenge& c) {
  const std::byte* p = in.data();
  if (load<std::uint32_t>(p + 0) != kChallengeMagic || load<std::uint32_t>(p + 4) != 0) {
    return false;
  }
  std::memcpy(c.acceptor_nonce.data(), p + 8, kAuthSize);
  std::memcpy(c.mac.data(), p + 8 + kAuthSize, kAuthSize);
  return true;
}

inline void encode(const Proof& f, ProofBytes& out) {
  std::byte* p = out.data();
  store<std::uint32_t>(p + 0, kProofMagic);
  store<std::uint32_t>(p + 4, 0);
  std::memcpy(p + 8, f.mac.data(), kAuthSize);
}

/// False on wrong magic or reserved bits.
inline bool decode(const ProofBytes& in, Proof& f) {
  const std::byte* p = in.data();
  if (load<std::uint32_t>(p + 0) != kProofMagic || load<std::uint32_t>(p + 4) != 0) return false;
  std::memcpy(f.mac.data(), p + 8, kAuthSize);
  return true;
}

inline void encode(AckStatus s, AckBytes& out) {
  store<std::uint32_t>(out.data() + 0, kAckMagic);
  store<std::uint32_t>(out.data() + 4, static_cast<std::uint32_t>(s));
}

/// False on wrong magic or a status this version does not know.
inline bool decode(const AckBytes& in, AckStatus& s) {
  if (load<std::uint32_t>(in.data()) != kAckMagic) return false;
  const auto v = load<std::uint32_t>(in.data() + 4);
  if (v > static_cast<std::uint32_t>(AckStatus::kDuplicate)) return false;
  s = static_cast<AckStatus>(v);
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

/// False unless `length` is kBlobSize and magic, version, family and the
/// reserved byte are valid.
inline bool decode(const void* in, std::size_t length, Blob& b) {
  if (in == nullptr || length != kBlobSize) return false;
  const auto* p = static_cast<const std::byte*>(in);
  if (load<std::uint32_t>(p + 0) != kBlobMagic || load<std::uint16_t>(p + 4) != kProtocolVersion ||
      load<std::uint8_t>(p + 23) != 0) {
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
