// Wire formats of the verbs transport: the endpoint address blob and the
// connection-handshake datagram. All integers little-endian; every decoder
// checks sizes, magic and version before it trusts a field.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

namespace chorus::verbs {

namespace wire {

inline void put16(unsigned char* p, std::uint16_t v) {
  p[0] = static_cast<unsigned char>(v);
  p[1] = static_cast<unsigned char>(v >> 8);
}
inline void put32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline void put64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
inline std::uint16_t get16(const unsigned char* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
inline std::uint32_t get32(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::uint32_t{p[i]} << (8 * i);
  return v;
}
inline std::uint64_t get64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::uint64_t{p[i]} << (8 * i);
  return v;
}

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
struct Blob {
  static constexpr std::uint32_t kMagic = 0x42564843;  // "CHVB"
  static constexpr std::uint16_t kVersion = 1;
  static constexpr std::size_t kSize = 64;
  static constexpr std::uint8_t kNoLink = 1;
  static constexpr std::uint8_t kInfiniBand = 2;
  static constexpr std::uint8_t kGlobal = 4;

  std::uint8_t flags = 0;
  std::uint8_t mtu = 0;
  std::int32_t rank = 0;
  std::int32_t peer_rank = 0;
  std::int32_t channel = 0;
  std::uint32_t qp_num = 0;
  std::uint32_t psn = 0;
  std::uint32_t ud_qp_num = 0;
  std::uint16_t lid = 0;
  std::uint8_t gid_index = 0;
  std::array<unsigned char, 16> gid{};
  std::uint64_t nonce = 0;

  void encode(unsigned char* p) const {
    std::memset(p, 0, kSize);
    wire::put32(p, kMagic);
    wire::put16(p + 4, kVersion);
    p[6] = flags;
    p[7] = mtu;
    wire::put32(p + 8, static_cast<std::uint32_t>(rank));
    wire::put32(p + 12, static_cast<std::uint32_t>(peer_rank));
    wire::put32(p + 16, static_cast<std::uint32_t>(channel));
    wire::put32(p + 20, qp_num);
    wire::put32(p + 24, psn);
    wire::put32(p + 28, ud_qp_num);
    wire::put16(p + 32, lid);
    p[34] = gid_index;
    std::memcpy(p + 36, gid.data(), gid.size());
    wire::put64(p + 52, nonce);
  }

  /// Empty when `p` is not a blob of this format and version.
  static std::optional<Blob> decode(const void* data, std::size_t len) {
    const auto* p = static_cast<const unsigned char*>(data);
    if (p == nullptr || len != kSize || wire::get32(p) != kMagic ||
        wire::get16(p + 4) != kVersion) {
      return std::nullopt;
    }
    Blob b;
    b.flags = p[6];
    b.mtu = p[7];
    b.rank = static_cast<std::int32_t>(wire::get32(p + 8));
    b.peer_rank = static_cast<std::int32_t>(wire::get32(p + 12));
    b.channel = static_cast<std::int32_t>(wire::get32(p + 16));
    b.qp_num = wire::get32(p + 20);
    b.psn = wire::get32(p + 24);
    b.ud_qp_num = wire::get32(p + 28);
    b.lid = wire::get16(p + 32);
    b.gid_index = p[34];
    std::memcpy(b.gid.data(), p + 36, b.gid.size());
    b.nonce = wire::get64(p + 52);
    if ((b.flags & ~(kNoLink | kInfiniBand | kGlobal)) != 0 || b.psn > 0xffffff) {
      return std::nullopt;
    }
    return b;
  }

  bool operator==(const Blob&) const = default;
};

/// The connection handshake, one UD datagram (88 bytes):
///
/// | off | size | field |
/// |---|---|---|
/// | 0 | 4 | magic "CHVH" |
/// | 4 | 2 | version (1) |
/// | 6 | 1 | kind: 1 = hello ("I am ready to receive; here is my blob"), 2 = accept |
/// | 7 | 1 | reserved |
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

  std::uint8_t kind = 0;
  std::uint32_t target_qp_num = 0;
  std::uint64_t target_nonce = 0;
  Blob sender;

  void encode(unsigned char* p) const {
    std::memset(p, 0, kSize);
    wire::put32(p, kMagic);
    wire::put16(p + 4, kVersion);
    p[6] = kind;
    wire::put32(p + 8, target_qp_num);
    wire::put64(p + 16, target_nonce);
    sender.encode(p + 24);
  }

  static std::optional<Handshake> decode(const unsigned char* p, std::size_t len) {
    if (len < kSize || wire::get32(p) != kMagic || wire::get16(p + 4) != kVersion) {
      return std::nullopt;
    }
    Handshake h;
    h.kind = p[6];
    if (h.kind != kHello && h.kind != kAccept) return std::nullopt;
    h.target_qp_num = wire::get32(p + 8);
    h.target_nonce = wire::get64(p + 16);
    auto b = Blob::decode(p + 24, Blob::kSize);
    if (!b) return std::nullopt;
    h.sender = *b;
    return h;
  }
};

}  // namespace chorus::verbs
