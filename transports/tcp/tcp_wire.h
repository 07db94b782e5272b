// Wire formats of the TCP transport: data frames, the connection handshake
// and the address blob. All integers are little-endian on the wire; every
// decoder checks magic, version and bounds before a value is used.
#pragma once

#include <chorus/provider/wire_fields.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace chorus::tcp::wire {

using provider::wire::EndpointId;
using provider::wire::Expect;
using provider::wire::Zero;

// ---- data frames --------------------------------------------------------
//
// Every message starts with one 24-byte header on socket 0:
//   u32 magic "CHRF" | u8 kind=1 | u8 stripes | u16 index=0 | u32 seq |
//   u32 imm | u64 length (whole message)
// followed by the bytes of part 0. `imm` is the sender's immediate
// (post_send_imm, transport ABI minor 5), 0 for a plain post_send. A message
// striped over n > 1 sockets also carries, on each socket i in 1..n-1 and in
// message order, a header of kind=2 with index=i, the same seq, stripes and
// imm, and length = size of part i, followed by that part. Part geometry is
// stripe_part() on both sides.

inline constexpr std::uint32_t kFrameMagic = 0x46524843;  // "CHRF"
inline constexpr std::size_t kFrameHeaderSize = 24;
using FrameBytes = std::array<std::byte, kFrameHeaderSize>;

enum class FrameKind : std::uint8_t { kMessage = 1, kStripe = 2 };

struct FrameHeader {
  FrameKind kind = FrameKind::kMessage;
  std::uint8_t stripes = 1;
  std::uint16_t index = 0;
  std::uint32_t seq = 0;
  std::uint32_t imm = 0;
  std::uint64_t length = 0;

  static constexpr void fields(auto& io, auto& s) {
    io(Expect{kFrameMagic}, s.kind, s.stripes, s.index, s.seq, s.imm, s.length);
  }
  bool valid() const { return kind == FrameKind::kMessage || kind == FrameKind::kStripe; }
};
static_assert(provider::wire::size<FrameHeader>() == kFrameHeaderSize);

inline void encode(const FrameHeader& h, FrameBytes& out) { provider::wire::encode(h, out.data()); }

/// False when the magic or kind is wrong: the stream is not ours or is
/// corrupt. Pure: reads exactly kFrameHeaderSize bytes.
inline bool decode(const FrameBytes& in, FrameHeader& h) {
  return provider::wire::decode_into(in.data(), in.size(), h);
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
                                  unsigned stripes, std::uint32_t imm, std::uint64_t part_size) {
  return h.kind == FrameKind::kStripe && h.index == index && h.seq == seq && h.stripes == stripes &&
         h.imm == imm && h.length == part_size;
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
//                     u16 flags | u64 target_nonce (from A's blob) |
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
//
// Hello flags (0 from a blocking endpoint_connect, so its bytes are what
// they always were):
//  - kHelloPolled: the socket comes from a polled connect (transport ABI
//    CHORUS_TP_CAP_CONNECT_POLL); if A's endpoint has not been claimed by
//    endpoint_connect yet, A's context reports a connect request for it.
//  - kHelloCallMe: sent by the LOWER rank of a pair whose polled connect
//    started first. It names the higher rank's endpoint (target_nonce from
//    that rank's blob), is authenticated like any Hello, parks nothing and
//    is closed after the Ack; the higher rank's context reports a connect
//    request, and its connect then dials as usual. So a pair still ends
//    with exactly the connection the higher rank dials.

inline constexpr std::uint32_t kHelloMagic = 0x48524843;      // "CHRH"
inline constexpr std::uint32_t kChallengeMagic = 0x43524843;  // "CHRC"
inline constexpr std::uint32_t kProofMagic = 0x50524843;      // "CHRP"
inline constexpr std::uint32_t kAckMagic = 0x41524843;        // "CHRA"
/// 2: authenticated handshake (Hello grew the connector nonce).
/// 3: data frame headers carry an immediate where version 2 had a reserved
///    zero (a version-2 peer would drop the stream at the first nonzero one).
inline constexpr std::uint16_t kProtocolVersion = 3;
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

inline constexpr std::uint16_t kHelloPolled = 1;
inline constexpr std::uint16_t kHelloCallMe = 2;
inline constexpr std::uint16_t kHelloKnownFlags = kHelloPolled | kHelloCallMe;

/// rank: the connecting rank; peer_rank: the accepting rank.
struct Hello : EndpointId {
  std::uint16_t sockets = 1;
  std::uint16_t index = 0;  ///< which of the endpoint's sockets this is
  std::uint16_t flags = 0;  ///< kHello* bits
  std::uint64_t target_nonce = 0;
  std::uint64_t sender_nonce = 0;
  AuthBytes connector_nonce{};

  static constexpr void fields(auto& io, auto& s) {
    io(Expect{kHelloMagic}, Expect{kProtocolVersion}, s.sockets);
    EndpointId::fields(io, s);
    io(s.index, s.flags, s.target_nonce, s.sender_nonce, s.connector_nonce);
  }
};
static_assert(provider::wire::size<Hello>() == kHelloSize);

struct Challenge {
  AuthBytes acceptor_nonce{};
  AuthBytes mac{};

  static constexpr void fields(auto& io, auto& s) {
    io(Expect{kChallengeMagic}, Zero<4>{}, s.acceptor_nonce, s.mac);
  }
};
static_assert(provider::wire::size<Challenge>() == kChallengeSize);

struct Proof {
  AuthBytes mac{};

  static constexpr void fields(auto& io, auto& s) { io(Expect{kProofMagic}, Zero<4>{}, s.mac); }
};
static_assert(provider::wire::size<Proof>() == kProofSize);

enum class AckStatus : std::uint32_t {
  kAccepted = 0,
  kUnknownEndpoint = 1,  ///< no open endpoint has that nonce/rank/channel
  kMismatch = 2,         ///< socket count differs between the two ranks
  kDuplicate = 3,        ///< this socket index already arrived
};

/// Ack's body; encode(AckStatus) and decode(AckStatus&) use it.
struct Ack {
  AckStatus status = AckStatus::kAccepted;

  static constexpr void fields(auto& io, auto& s) { io(Expect{kAckMagic}, s.status); }
  bool valid() const { return status <= AckStatus::kDuplicate; }
};
static_assert(provider::wire::size<Ack>() == kAckSize);

inline void encode(const Hello& h, HelloBytes& out) { provider::wire::encode(h, out.data()); }

/// False on wrong magic, version, reserved bits or unknown flags.
inline bool decode(const HelloBytes& in, Hello& h) {
  return provider::wire::decode_into(in.data(), in.size(), h) && (h.flags & ~kHelloKnownFlags) == 0;
}

inline void encode(const Challenge& c, ChallengeBytes& out) {
  provider::wire::encode(c, out.data());
}

/// False on wrong magic or reserved bits.
inline bool decode(const ChallengeBytes& in, Challenge& c) {
  return provider::wire::decode_into(in.data(), in.size(), c);
}

inline void encode(const Proof& f, ProofBytes& out) { provider::wire::encode(f, out.data()); }

/// False on wrong magic or reserved bits.
inline bool decode(const ProofBytes& in, Proof& f) {
  return provider::wire::decode_into(in.data(), in.size(), f);
}

inline void encode(AckStatus s, AckBytes& out) { provider::wire::encode(Ack{s}, out.data()); }

/// False on wrong magic or a status this version does not know.
inline bool decode(const AckBytes& in, AckStatus& s) {
  const auto ack = provider::wire::decode<Ack>(in.data(), in.size());
  if (ack) s = ack->status;
  return ack.has_value();
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

/// rank: the owner.
struct Blob : EndpointId {
  std::uint16_t sockets = 1;
  std::uint16_t port = 0;
  std::uint8_t family = 4;
  std::array<std::uint8_t, 16> address{};
  std::uint64_t nonce = 0;

  static constexpr void fields(auto& io, auto& s) {
    io(Expect{kBlobMagic}, Expect{kProtocolVersion}, s.sockets);
    EndpointId::fields(io, s);
    io(s.port, s.family, Zero<1>{}, s.address, s.nonce);
  }
  bool valid() const { return (family == 4 || family == 6) && port != 0; }
};
static_assert(provider::wire::size<Blob>() == kBlobSize);

inline void encode(const Blob& b, std::byte* out /* kBlobSize bytes */) {
  provider::wire::encode(b, out);
}

/// False unless `length` is kBlobSize and magic, version, family and the
/// reserved byte are valid.
inline bool decode(const void* in, std::size_t length, Blob& b) {
  return length == kBlobSize && provider::wire::decode_into(in, length, b);
}

}  // namespace chorus::tcp::wire
