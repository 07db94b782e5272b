// Wire formats of the libfabric transport: the tag layout of every message,
// the address blob the core exchanges, and the control messages endpoints
// trade over the fabric (hello, ack, bye, call-me). All integers are little-endian;
// every decoder checks magic, version and bounds before a value is used.
#pragma once

#include <chorus/provider/wire_fields.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

namespace chorus::ofi::wire {

using provider::wire::as;
using provider::wire::EndpointId;
using provider::wire::Expect;
using provider::wire::Skip;

// ---- tags ------------------------------------------------------------------
//
// Every message is a tagged message (FI_TAGGED) to the peer endpoint's own
// fi endpoint:
//   bits 63..60  zero (providers such as net reserve the top bits)
//   bits 59..58  kind: 1 data, 2 control
//   bits 57..36  the receiving endpoint's 22-bit key (from its blob)
//   bits 35..0   zero
// Receives match the whole tag (ignore mask 0): shm in libfabric 1.17 does
// not apply the ignore mask to messages that arrived before their receive,
// so nothing variable may live in a tag. The key keeps strays (a stale
// sender reusing an old address) out of an endpoint's receives.

inline constexpr int kKindShift = 58;
/// Tag bits the layout needs from the provider (fi_info mem_tag_format).
inline constexpr int kTagBits = 60;
inline constexpr std::uint64_t kKindData = 1;
inline constexpr std::uint64_t kKindControl = 2;
inline constexpr int kKeyShift = 36;
inline constexpr std::uint32_t kKeyMask = (1u << 22) - 1;
/// Largest message the transport accepts (as the tcp transport: 2^40 - 1).
inline constexpr std::uint64_t kMaxMessageSize = (std::uint64_t{1} << 40) - 1;

constexpr std::uint64_t data_tag(std::uint32_t key) {
  return (kKindData << kKindShift) | (std::uint64_t{key & kKeyMask} << kKeyShift);
}
constexpr std::uint64_t control_tag(std::uint32_t key) {
  return (kKindControl << kKindShift) | (std::uint64_t{key & kKeyMask} << kKeyShift);
}

// ---- address blob ------------------------------------------------------------
//
// What endpoint_open hands the core (96-byte header + the fi_getname name):
//   0 u32 magic "CHOB" | 4 u16 version=1 | 6 u16 name_len | 8 i32 rank |
//   12 i32 peer_rank | 16 i32 channel | 20 u32 key | 24 u32 provider
//   fingerprint | 28 u32 pid | 32 u64 process start time | 40 u8[16] boot id |
//   56 u64 pid namespace inode | 64 u16 watch port | 66 u8 watch family
//   (0 none, 4, 6) | 67 u8 reserved | 68 u8[16] watch address | 84 u32
//   reserved | 88 u64 context token | 96 name

inline constexpr std::uint32_t kBlobMagic = 0x424F4843;  // "CHOB"
inline constexpr std::uint16_t kBlobVersion = 1;
inline constexpr std::size_t kBlobHeaderSize = 96;
inline constexpr std::size_t kMaxNameSize = 256;
inline constexpr std::size_t kMaxBlobSize = kBlobHeaderSize + kMaxNameSize;

/// rank: the owner.
struct Blob : EndpointId {
  std::uint32_t key = 0;
  std::uint32_t provider = 0;
  std::uint32_t pid = 0;
  std::uint64_t start_time = 0;
  std::array<std::byte, 16> boot_id{};
  std::uint64_t pid_namespace = 0;
  std::uint16_t watch_port = 0;
  std::uint8_t watch_family = 0;
  std::array<std::byte, 16> watch_address{};
  std::uint64_t context_token = 0;
  std::size_t name_len = 0;
  std::array<std::byte, kMaxNameSize> name{};

  std::span<const std::byte> name_bytes() const { return {name.data(), name_len}; }
  std::size_t size() const { return kBlobHeaderSize + name_len; }

  /// The 96-byte header; the name follows it.
  static constexpr void fields(auto& io, auto& s) {
    io(Expect{kBlobMagic}, Expect{kBlobVersion}, as<std::uint16_t>(s.name_len));
    EndpointId::fields(io, s);
    io(s.key, s.provider, s.pid, s.start_time, s.boot_id, s.pid_namespace, s.watch_port,
       s.watch_family, Skip<1>{}, s.watch_address, Skip<4>{}, s.context_token);
  }
  bool valid() const {
    return key != 0 && (key & ~kKeyMask) == 0 &&
           (watch_family == 0 || watch_family == 4 || watch_family == 6);
  }
};
static_assert(provider::wire::size<Blob>() == kBlobHeaderSize);

inline void encode(const Blob& b, std::byte* out) {
  provider::wire::encode(b, out);
  std::memcpy(out + kBlobHeaderSize, b.name.data(), b.name_len);
}

/// Checks magic, version and lengths; nullopt when `data` is not a blob.
inline std::optional<Blob> decode_blob(const void* data, std::size_t length) {
  auto b = provider::wire::decode<Blob>(data, length);
  if (!b || b->name_len == 0 || b->name_len > kMaxNameSize ||
      length != kBlobHeaderSize + b->name_len) {
    return std::nullopt;
  }
  std::memcpy(b->name.data(), static_cast<const std::byte*>(data) + kBlobHeaderSize, b->name_len);
  return b;
}

// ---- control messages --------------------------------------------------------
//
// Sent with control_tag(receiver's key), from the sender's endpoint:
//   0 u32 magic "CHOC" | 4 u8 type | 5 u8 flags | 6 u16 name_len |
//   8 u32 sender key | 12 u32 reserved | 16 u64 count | 24 name
// hello: the sender (the higher rank) called endpoint_connect; carries its
// name so the receiver can answer before it has the sender's blob. ack:
// answers a hello. bye: the sender closed its endpoint after handing `count`
// data messages to the provider; nothing follows them. call-me: the sender
// (the lower rank) started a polled connect and asks the receiver to say
// hello; it carries no name, since the receiver answers only once it has the
// sender's blob (docs/ofi.md, "Polled connects").
//
// Flags: kFlagPolled on a hello marks a polled connect (P10), which raises a
// connect request at a receiver that has not called endpoint_connect yet.
//
// Compatibility: the flags byte was reserved and written as zero before, and
// decoders skip it unread, so an older peer's hello reads as a blocking one
// and an older receiver ignores the flag. Call-me is a type older decoders
// reject as malformed (and drop); that is harmless only because an older
// peer never declares CHORUS_TP_CAP_CONNECT_POLL to its core, and every rank
// of a job loads the same transport build, so polled connects never meet an
// older peer.

inline constexpr std::uint32_t kControlMagic = 0x434F4843;  // "CHOC"
inline constexpr std::size_t kControlHeaderSize = 24;
inline constexpr std::size_t kControlBufferSize = 512;
static_assert(kControlHeaderSize + kMaxNameSize <= kControlBufferSize);

enum class ControlType : std::uint8_t { kHello = 1, kAck = 2, kBye = 3, kCallMe = 4 };

/// Control flag bits.
inline constexpr std::uint8_t kFlagPolled = 1;

struct Control {
  ControlType type = ControlType::kHello;
  std::uint8_t flags = 0;
  std::uint32_t sender_key = 0;
  std::uint64_t count = 0;
  std::size_t name_len = 0;
  const std::byte* name = nullptr;  // points into the decoded buffer

  /// The 24-byte header; the name follows it.
  static constexpr void fields(auto& io, auto& s) {
    io(Expect{kControlMagic}, s.type, s.flags, as<std::uint16_t>(s.name_len), s.sender_key,
       Skip<4>{}, s.count);
  }
  bool valid() const {
    return type >= ControlType::kHello && type <= ControlType::kCallMe &&
           name_len <= kMaxNameSize && sender_key != 0 && (sender_key & ~kKeyMask) == 0;
  }
};
static_assert(provider::wire::size<Control>() == kControlHeaderSize);

/// Writes a control message into `out` (kControlBufferSize bytes); returns its length.
inline std::size_t encode(ControlType type, std::uint8_t flags, std::uint32_t sender_key,
                          std::uint64_t count, std::span<const std::byte> name, std::byte* out) {
  provider::wire::encode(Control{type, flags, sender_key, count, name.size()}, out);
  if (!name.empty()) std::memcpy(out + kControlHeaderSize, name.data(), name.size());
  return kControlHeaderSize + name.size();
}

// ---- out-of-band call-me -------------------------------------------------------
//
// A lower rank's polled connect sends its call-me outside the fabric when it
// can (docs/ofi.md, "Polled connects"): as one datagram to the peer
// context's doorbell (providers without a wait fd), or over a connection of
// its own to the peer's watch listener, closed once sent (16 B):
//   0 u32 magic "CHOM" | 4 u32 the receiving endpoint's key | 8 u64 the
//   receiving context's token (from its blob)
// It only raises that endpoint's connect request.

inline constexpr std::uint32_t kCallMeMagic = 0x4D4F4843;  // "CHOM"
inline constexpr std::size_t kCallMeSize = 16;

struct WatchCallMe {
  std::uint32_t key = 0;
  std::uint64_t token = 0;

  static constexpr void fields(auto& io, auto& s) { io(Expect{kCallMeMagic}, s.key, s.token); }
};
static_assert(provider::wire::size<WatchCallMe>() == kCallMeSize);

inline std::optional<Control> decode_control(const std::byte* p, std::size_t length) {
  auto c = provider::wire::decode<Control>(p, length);
  if (!c || length != kControlHeaderSize + c->name_len) return std::nullopt;
  c->name = p + kControlHeaderSize;
  return c;
}

}  // namespace chorus::ofi::wire
