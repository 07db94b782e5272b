// Wire formats of the verbs transport: the endpoint address blob and the
// connection-handshake datagram. All integers little-endian; every decoder
// checks sizes, magic and version before it trusts a field.
#pragma once

#include <chorus/provider/wire_fields.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

namespace chorus::verbs {

namespace wire {
using provider::wire::EndpointId;
using provider::wire::Expect;
using provider::wire::Skip;
}  // namespace wire

/// The address blob of one endpoint (64 bytes):
///
/// | off | size | field |
/// |---|---|---|
/// | 0 | 4 | magic "CHVB" |
/// | 4 | 2 | version (1) |
/// | 6 | 1 | flags: 1 = no link (empty device-matrix entry), 2 = InfiniBand link layer, 4 = GRH
/// (GID routing) | | 7 | 1 | path MTU (enum ibv_mtu) of the owner's port | | 8 | 4 | owner's rank |
/// | 12 | 4 | peer rank it is for |
/// | 16 | 4 | channel |
/// | 20 | 4 | RC QP number |
/// | 24 | 4 | initial PSN (24 bits) |
/// | 28 | 4 | handshake (UD) QP number |
/// | 32 | 2 | LID |
/// | 34 | 1 | GID index on the owner's port |
/// | 35 | 1 | reserved |
/// | 36 | 16 | GID |
/// | 52 | 8 | nonce: random per endpoint; the handshake must echo it |
/// | 60 | 4 | reserved |
struct Blob : wire::EndpointId {
  static constexpr std::uint32_t kMagic = 0x42564843;  // "CHVB"
  static constexpr std::uint16_t kVersion = 1;
  static constexpr std::size_t kSize = 64;
  static constexpr std::uint8_t kNoLink = 1;
  static constexpr std::uint8_t kInfiniBand = 2;
  static constexpr std::uint8_t kGlobal = 4;

  std::uint8_t flags = 0;
  std::uint8_t mtu = 0;
  std::uint32_t qp_num = 0;
  std::uint32_t psn = 0;
  std::uint32_t ud_qp_num = 0;
  std::uint16_t lid = 0;
  std::uint8_t gid_index = 0;
  std::array<unsigned char, 16> gid{};
  std::uint64_t nonce = 0;

  static constexpr void fields(auto& io, auto& s) {
    io(wire::Expect{kMagic}, wire::Expect{kVersion}, s.flags, s.mtu);
    EndpointId::fields(io, s);
    io(s.qp_num, s.psn, s.ud_qp_num, s.lid, s.gid_index, wire::Skip<1>{}, s.gid, s.nonce,
       wire::Skip<4>{});
  }
  bool valid() const {
    return (flags & ~(kNoLink | kInfiniBand | kGlobal)) == 0 && psn <= 0xffffff;
  }

  void encode(unsigned char* p) const { provider::wire::encode(*this, p); }

  /// Empty when `p` is not a blob of this format and version.
  static std::optional<Blob> decode(const void* data, std::size_t len) {
    if (len != kSize) return std::nullopt;
    return provider::wire::decode<Blob>(data, len);
  }

  bool operator==(const Blob&) const = default;
};
static_assert(provider::wire::size<Blob>() == Blob::kSize);

/// The connection handshake, one UD datagram (88 bytes):
///
/// | off | size | field |
/// |---|---|---|
/// | 0 | 4 | magic "CHVH" |
/// | 4 | 2 | version (1) |
/// | 6 | 1 | kind: 1 = hello ("I am ready to receive; here is my blob"), 2 = accept |
/// | 7 | 1 | flags: 1 = polled (the hello of a polled connect, which raises a connect request) |
/// | 8 | 4 | target RC QP number (from the target's blob) |
/// | 12 | 4 | reserved |
/// | 16 | 8 | target nonce (from the target's blob) |
/// | 24 | 64 | the sender's own blob |
struct Handshake {
  static constexpr std::uint32_t kMagic = 0x48564843;  // "CHVH"
  static constexpr std::uint16_t kVersion = 1;
  static constexpr std::size_t kSize = 24 + Blob::kSize;
  static constexpr std::uint8_t kHello = 1;
  static constexpr std::uint8_t kAccept = 2;
  /// The byte was reserved and written as zero before polled connects, so
  /// an older sender's hello reads as a blocking connect's.
  static constexpr std::uint8_t kPolled = 1;

  std::uint8_t kind = 0;
  std::uint8_t flags = 0;
  std::uint32_t target_qp_num = 0;
  std::uint64_t target_nonce = 0;
  Blob sender;

  static constexpr void fields(auto& io, auto& s) {
    io(wire::Expect{kMagic}, wire::Expect{kVersion}, s.kind, s.flags, s.target_qp_num,
       wire::Skip<4>{}, s.target_nonce, s.sender);
  }
  bool valid() const { return kind == kHello || kind == kAccept; }

  void encode(unsigned char* p) const { provider::wire::encode(*this, p); }

  static std::optional<Handshake> decode(const unsigned char* p, std::size_t len) {
    return provider::wire::decode<Handshake>(p, len);
  }
};
static_assert(provider::wire::size<Handshake>() == Handshake::kSize);

}  // namespace chorus::verbs
