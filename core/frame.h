// Wire format of the bootstrap side channel: pure encode/decode, no I/O.
//
// Kept apart from the socket code so that it can be unit-tested and fuzzed on
// plain byte buffers. Nothing here allocates while decoding: decode_frame()
// only looks at the bytes it is given and hands back a view of the payload.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace chorus::core::frame {

// ---------------------------------------------------------------------------
// Layout
//
// A frame is a 12-byte header followed by `length` payload bytes:
//
//   offset 0  u32 magic    0x53524843, i.e. the bytes 'C' 'H' 'R' 'S'
//   offset 4  u16 version  kVersion
//   offset 6  u16 type     Type
//   offset 8  u32 length   payload bytes, at most max_payload(type)
//
// Every integer on the wire, in the header and in the payloads below, is
// little-endian. That is the native order of every host Chorus targets, so
// encoding is a copy there; the helpers use explicit shifts, so the code is
// still correct on a big-endian host.
//
// The length is checked against the per-type maximum before a reader
// allocates or waits for the payload, so a peer cannot make us reserve more
// than max_payload(type) bytes for one frame.
// ---------------------------------------------------------------------------

inline constexpr std::uint32_t kMagic = 0x53524843u;
// Version 2 added the authentication frames (kAuth*) before the hello;
// version 3 the ring links between ranks: listen addresses in the hello and
// the welcome, kPass frames and OpHeader's flags.
inline constexpr std::uint16_t kVersion = 3;
inline constexpr std::size_t kHeaderSize = 12;

/// Largest blob one frame carries: a broadcast's whole blob, or one piece of
/// an all_gather blob (those are sent in pieces of at most this size).
inline constexpr std::size_t kMaxBlob = std::size_t{1} << 20;
/// Largest blob one rank may contribute to an all_gather, in pieces.
inline constexpr std::size_t kMaxGatherBlob = std::size_t{1} << 30;
/// Longest error text an abort frame carries (longer text is cut).
inline constexpr std::size_t kMaxAbortText = 4096;

/// Frame types. Frozen: append only, bump kVersion when a meaning changes.
enum class Type : std::uint16_t {
  kHello = 1,          ///< connecting -> listening end: who I am (Hello payload)
  kWelcome = 2,        ///< rank 0: every rank has joined; a ring neighbour: link up (Welcome)
  kAbort = 3,          ///< either way: the side channel is being torn down (Abort payload)
  kContribute = 4,     ///< non-root -> rank 0: OpHeader + this rank's blob
  kDeliver = 5,        ///< rank 0 -> non-root: OpHeader + one blob of the result
  kAuthInit = 6,       ///< connecting -> listening end, first frame: its nonce (AuthInit)
  kAuthChallenge = 7,  ///< listening -> connecting end: its nonce and proof (AuthChallenge)
  kAuthProof = 8,      ///< connecting -> listening end: its proof (AuthProof), then the hello
  kPass = 9,           ///< along the ring (bootstrap_ring.h): OpHeader + a piece of one rank's blob
};

/// Collectives carried by kContribute / kDeliver frames.
enum class Op : std::uint16_t { kAllGather = 1, kBarrier = 2, kBroadcast = 3 };

inline constexpr std::size_t kAddressSize = 20;
inline constexpr std::size_t kHelloSize = 16 + kAddressSize;
inline constexpr std::size_t kWelcomeSize = 12;
/// Listen addresses a welcome may carry after its fixed part.
inline constexpr std::size_t kMaxWelcomeAddresses = 2;
inline constexpr std::size_t kAbortFixedSize = 4;
inline constexpr std::size_t kOpHeaderSize = 16;
inline constexpr std::size_t kAuthNonceSize = 32;
inline constexpr std::size_t kAuthMacSize = 32;
inline constexpr std::size_t kAuthInitSize = kAuthNonceSize;
inline constexpr std::size_t kAuthChallengeSize = kAuthNonceSize + kAuthMacSize;
inline constexpr std::size_t kAuthProofSize = kAuthMacSize;

/// True for the types this version understands.
constexpr bool is_known(std::uint16_t type) noexcept { return type >= 1 && type <= 9; }

/// Largest payload accepted for `type`; 0 for unknown types. Fixed-size
/// payloads leave room for fields appended by later minor revisions.
constexpr std::size_t max_payload(Type type) noexcept {
  switch (type) {
    case Type::kHello:
    case Type::kWelcome:
      return 64;
    case Type::kAbort:
      return kAbortFixedSize + kMaxAbortText;
    case Type::kContribute:
    case Type::kDeliver:
    case Type::kPass:
      return kOpHeaderSize + kMaxBlob;
    case Type::kAuthInit:
    case Type::kAuthChallenge:
    case Type::kAuthProof:
      return 128;
  }
  return 0;
}

constexpr const char* type_name(Type type) noexcept {
  switch (type) {
    case Type::kHello:
      return "hello";
    case Type::kWelcome:
      return "welcome";
    case Type::kAbort:
      return "abort";
    case Type::kContribute:
      return "contribute";
    case Type::kDeliver:
      return "deliver";
    case Type::kAuthInit:
      return "auth-init";
    case Type::kAuthChallenge:
      return "auth-challenge";
    case Type::kAuthProof:
      return "auth-proof";
    case Type::kPass:
      return "pass";
  }
  return "unknown";
}

constexpr const char* op_name(Op op) noexcept {
  switch (op) {
    case Op::kAllGather:
      return "all_gather";
    case Op::kBarrier:
      return "barrier";
    case Op::kBroadcast:
      return "broadcast";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------
// Little-endian helpers
// ---------------------------------------------------------------------------

template <class T>
constexpr void store_le(std::byte* out, T value) noexcept {
  using U = std::make_unsigned_t<T>;
  auto u = static_cast<U>(value);
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    out[i] = static_cast<std::byte>((u >> (8 * i)) & 0xffu);
  }
}

template <class T>
constexpr T load_le(const std::byte* in) noexcept {
  using U = std::make_unsigned_t<T>;
  U u = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    u = static_cast<U>(u | (static_cast<U>(std::to_integer<std::uint8_t>(in[i])) << (8 * i)));
  }
  return static_cast<T>(u);
}

// ---------------------------------------------------------------------------
// Header and frame decoding
// ---------------------------------------------------------------------------

/// The header fields as they were on the wire, before any validation.
struct Header {
  std::uint32_t magic = 0;
  std::uint16_t version = 0;
  std::uint16_t type = 0;
  std::uint32_t length = 0;
};

/// Why a header was refused.
enum class Error : std::uint8_t { kNone, kBadMagic, kBadVersion, kUnknownType, kTooLong };

inline Header read_header(std::span<const std::byte, kHeaderSize> in) noexcept {
  return {load_le<std::uint32_t>(in.data()), load_le<std::uint16_t>(in.data() + 4),
          load_le<std::uint16_t>(in.data() + 6), load_le<std::uint32_t>(in.data() + 8)};
}

/// Validates a header. On kNone the caller may allocate `length` bytes: it is
/// at most max_payload(type).
constexpr Error check_header(const Header& h) noexcept {
  if (h.magic != kMagic) return Error::kBadMagic;
  if (h.version != kVersion) return Error::kBadVersion;
  if (!is_known(h.type)) return Error::kUnknownType;
  if (h.length > max_payload(static_cast<Type>(h.type))) return Error::kTooLong;
  return Error::kNone;
}

/// A human-readable reason for a refused header, for logs and Status text.
inline std::string describe(Error error, const Header& h) {
  switch (error) {
    case Error::kNone:
      return "valid frame header";
    case Error::kBadMagic: {
      static constexpr char kHex[] = "0123456789abcdef";
      std::string hex = "0x";
      for (int shift = 28; shift >= 0; shift -= 4) hex += kHex[(h.magic >> shift) & 0xfu];
      return "bad magic " + hex + " (not a Chorus side-channel peer)";
    }
    case Error::kBadVersion:
      return "unsupported side-channel protocol version " + std::to_string(h.version) +
             " (this build speaks " + std::to_string(kVersion) +
             "; are all ranks running the same Chorus?)";
    case Error::kUnknownType:
      return "unknown frame type " + std::to_string(h.type);
    case Error::kTooLong:
      return std::string(type_name(static_cast<Type>(h.type))) + " frame of " +
             std::to_string(h.length) + " bytes exceeds the limit of " +
             std::to_string(max_payload(static_cast<Type>(h.type))) + " bytes";
  }
  return "invalid frame header";
}

enum class DecodeState : std::uint8_t { kNeedMore, kFrame, kError };

/// What decode_frame() found at the start of a buffer.
struct Decoded {
  DecodeState state = DecodeState::kNeedMore;
  Error error = Error::kNone;          ///< kError: why
  Header header{};                     ///< filled once kHeaderSize bytes were seen
  std::size_t needed = kHeaderSize;    ///< kNeedMore: bytes the buffer must hold to progress
  std::span<const std::byte> payload;  ///< kFrame: view into the input
  std::size_t consumed = 0;            ///< kFrame: header + payload bytes to drop
};

/// Decodes the frame at the start of `in`. Pure, never allocates, never reads
/// past `in`. The header is validated (magic, version, type, length against
/// the type's maximum) before the payload is waited for, so `needed` is never
/// more than kHeaderSize + max_payload(type).
inline Decoded decode_frame(std::span<const std::byte> in) noexcept {
  Decoded d;
  if (in.size() < kHeaderSize) return d;
  d.header = read_header(in.first<kHeaderSize>());
  d.error = check_header(d.header);
  if (d.error != Error::kNone) {
    d.state = DecodeState::kError;
    d.needed = 0;
    return d;
  }
  const std::size_t total = kHeaderSize + d.header.length;
  if (in.size() < total) {
    d.needed = total;
    return d;
  }
  d.state = DecodeState::kFrame;
  d.needed = 0;
  d.payload = in.subspan(kHeaderSize, d.header.length);
  d.consumed = total;
  return d;
}

// ---------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------

/// The header for a frame of `type` carrying `length` payload bytes. The
/// caller keeps length <= max_payload(type).
inline std::array<std::byte, kHeaderSize> encode_header(Type type, std::uint32_t length) noexcept {
  std::array<std::byte, kHeaderSize> out{};
  store_le(out.data(), kMagic);
  store_le(out.data() + 4, kVersion);
  store_le(out.data() + 6, static_cast<std::uint16_t>(type));
  store_le(out.data() + 8, length);
  return out;
}

/// Header and payload in one buffer; for small frames (hello, welcome, abort).
inline std::vector<std::byte> encode_frame(Type type, std::span<const std::byte> payload) {
  std::vector<std::byte> out(kHeaderSize + payload.size());
  const auto header = encode_header(type, static_cast<std::uint32_t>(payload.size()));
  std::copy(header.begin(), header.end(), out.begin());
  std::copy(payload.begin(), payload.end(), out.begin() + kHeaderSize);
  return out;
}

// ---------------------------------------------------------------------------
// Payloads. Decoders accept longer payloads than they know (fields appended
// later) and return nullopt for shorter ones.
// ---------------------------------------------------------------------------

/// Where a rank listens for its ring neighbours (bootstrap_ring.h): u16 port
/// (0: not listening), u8 family (4 or 6), u8 reserved (0), u8 address[16]
/// (IPv4 in the first 4 bytes).
struct Address {
  std::uint16_t port = 0;
  std::uint8_t family = 0;
  std::array<std::uint8_t, 16> bytes{};
};

inline void encode_address(const Address& a, std::byte* out) noexcept {
  store_le(out, a.port);
  out[2] = static_cast<std::byte>(a.family);
  out[3] = std::byte{0};
  for (std::size_t i = 0; i < a.bytes.size(); ++i) out[4 + i] = static_cast<std::byte>(a.bytes[i]);
}

/// nullopt when the reserved byte is not 0.
inline std::optional<Address> decode_address(const std::byte* in) noexcept {
  if (in[3] != std::byte{0}) return std::nullopt;
  Address a;
  a.port = load_le<std::uint16_t>(in);
  a.family = std::to_integer<std::uint8_t>(in[2]);
  for (std::size_t i = 0; i < a.bytes.size(); ++i) {
    a.bytes[i] = std::to_integer<std::uint8_t>(in[4 + i]);
  }
  return a;
}

/// A rank introducing itself: i32 rank, i32 size, u64 job_tag, then the
/// Address it listens on for ring links (port 0 when it takes none).
struct Hello {
  std::int32_t rank = -1;
  std::int32_t size = 0;
  std::uint64_t job_tag = 0;
  Address listen{};
};

inline std::array<std::byte, kHelloSize> encode_hello(const Hello& h) noexcept {
  std::array<std::byte, kHelloSize> out{};
  store_le(out.data(), h.rank);
  store_le(out.data() + 4, h.size);
  store_le(out.data() + 8, h.job_tag);
  encode_address(h.listen, out.data() + 16);
  return out;
}

inline std::optional<Hello> decode_hello(std::span<const std::byte> in) noexcept {
  if (in.size() < kHelloSize) return std::nullopt;
  const auto listen = decode_address(in.data() + 16);
  if (!listen) return std::nullopt;
  return Hello{load_le<std::int32_t>(in.data()), load_le<std::int32_t>(in.data() + 4),
               load_le<std::uint64_t>(in.data() + 8), *listen};
}

/// The answer to an admitted hello: i32 size, u64 job_tag, then up to
/// kMaxWelcomeAddresses Address entries (rank 0's welcome: where the ring
/// neighbours this rank must connect to listen; a ring link's: none).
struct Welcome {
  std::int32_t size = 0;
  std::uint64_t job_tag = 0;
  std::vector<Address> connect_to;
};

inline std::vector<std::byte> encode_welcome(const Welcome& w) {
  std::vector<std::byte> out(kWelcomeSize + kAddressSize * w.connect_to.size());
  store_le(out.data(), w.size);
  store_le(out.data() + 4, w.job_tag);
  for (std::size_t i = 0; i < w.connect_to.size(); ++i) {
    encode_address(w.connect_to[i], out.data() + kWelcomeSize + i * kAddressSize);
  }
  return out;
}

/// Addresses past kMaxWelcomeAddresses (a later revision's) are ignored.
inline std::optional<Welcome> decode_welcome(std::span<const std::byte> in) {
  if (in.size() < kWelcomeSize) return std::nullopt;
  Welcome w{load_le<std::int32_t>(in.data()), load_le<std::uint64_t>(in.data() + 4), {}};
  const std::size_t count =
      std::min((in.size() - kWelcomeSize) / kAddressSize, kMaxWelcomeAddresses);
  for (std::size_t i = 0; i < count; ++i) {
    const auto a = decode_address(in.data() + kWelcomeSize + i * kAddressSize);
    if (!a) return std::nullopt;
    w.connect_to.push_back(*a);
  }
  return w;
}

/// The side channel is going down: i32 chorus_status_t, then UTF-8 text up to
/// the end of the payload.
struct Abort {
  std::int32_t code = 0;
  std::string text;
};

inline std::vector<std::byte> encode_abort(std::int32_t code, std::string_view text) {
  text = text.substr(0, std::min(text.size(), kMaxAbortText));
  std::vector<std::byte> out(kAbortFixedSize + text.size());
  store_le(out.data(), code);
  if (!text.empty()) std::memcpy(out.data() + kAbortFixedSize, text.data(), text.size());
  return out;
}

inline std::optional<Abort> decode_abort(std::span<const std::byte> in) {
  if (in.size() < kAbortFixedSize) return std::nullopt;
  const auto text = in.subspan(kAbortFixedSize);
  return Abort{load_le<std::int32_t>(in.data()),
               std::string(reinterpret_cast<const char*>(text.data()), text.size())};
}

/// OpHeader::flags: more pieces of this blob follow (kPass only).
inline constexpr std::uint16_t kMorePieces = 1;

/// Starts every kContribute / kDeliver / kPass payload; the blob (or piece)
/// follows it. u64 seq (the caller's n-th side-channel collective, from 1),
/// u16 op, u16 flags, i32 arg: the broadcast root in a contribution, the
/// index of the blob in a delivery or a pass.
struct OpHeader {
  std::uint64_t seq = 0;
  Op op = Op::kBarrier;
  std::int32_t arg = 0;
  std::uint16_t flags = 0;
};

inline std::array<std::byte, kOpHeaderSize> encode_op(const OpHeader& h) noexcept {
  std::array<std::byte, kOpHeaderSize> out{};
  store_le(out.data(), h.seq);
  store_le(out.data() + 8, static_cast<std::uint16_t>(h.op));
  store_le(out.data() + 10, h.flags);
  store_le(out.data() + 12, h.arg);
  return out;
}

/// nullopt when `in` is too short or names an unknown op. The blob is
/// in.subspan(kOpHeaderSize).
inline std::optional<OpHeader> decode_op(std::span<const std::byte> in) noexcept {
  if (in.size() < kOpHeaderSize) return std::nullopt;
  const auto op = load_le<std::uint16_t>(in.data() + 8);
  if (op < 1 || op > 3) return std::nullopt;
  return OpHeader{load_le<std::uint64_t>(in.data()), static_cast<Op>(op),
                  load_le<std::int32_t>(in.data() + 12), load_le<std::uint16_t>(in.data() + 10)};
}

// Authentication (see core/auth.h for the MACs). A connecting rank opens
// with kAuthInit carrying its nonce; rank 0 answers kAuthChallenge with its
// own nonce and its proof over both; the rank checks that proof and answers
// kAuthProof, then its hello. Rank 0 reads no hello before a valid proof.
// A ring link runs the same exchange, the listening neighbour in rank 0's
// part.

using AuthBytes = std::array<std::byte, kAuthNonceSize>;

struct AuthInit {
  AuthBytes rank_nonce{};
};

struct AuthChallenge {
  AuthBytes root_nonce{};
  AuthBytes proof{};
};

struct AuthProof {
  AuthBytes proof{};
};

static_assert(kAuthNonceSize == kAuthMacSize);

inline std::array<std::byte, kAuthInitSize> encode_auth_init(const AuthInit& a) noexcept {
  return a.rank_nonce;
}

inline std::optional<AuthInit> decode_auth_init(std::span<const std::byte> in) noexcept {
  if (in.size() < kAuthInitSize) return std::nullopt;
  AuthInit a;
  std::copy_n(in.begin(), kAuthNonceSize, a.rank_nonce.begin());
  return a;
}

inline std::array<std::byte, kAuthChallengeSize> encode_auth_challenge(
    const AuthChallenge& c) noexcept {
  std::array<std::byte, kAuthChallengeSize> out{};
  std::copy(c.root_nonce.begin(), c.root_nonce.end(), out.begin());
  std::copy(c.proof.begin(), c.proof.end(), out.begin() + kAuthNonceSize);
  return out;
}

inline std::optional<AuthChallenge> decode_auth_challenge(std::span<const std::byte> in) noexcept {
  if (in.size() < kAuthChallengeSize) return std::nullopt;
  AuthChallenge c;
  std::copy_n(in.begin(), kAuthNonceSize, c.root_nonce.begin());
  std::copy_n(in.begin() + kAuthNonceSize, kAuthMacSize, c.proof.begin());
  return c;
}

inline std::array<std::byte, kAuthProofSize> encode_auth_proof(const AuthProof& p) noexcept {
  return p.proof;
}

inline std::optional<AuthProof> decode_auth_proof(std::span<const std::byte> in) noexcept {
  if (in.size() < kAuthProofSize) return std::nullopt;
  AuthProof p;
  std::copy_n(in.begin(), kAuthMacSize, p.proof.begin());
  return p;
}

/// The value a hello carries to show which job a rank belongs to: 64-bit
/// FNV-1a of a domain string and the job token. Authentication is the
/// kAuth* exchange before the hello; this tag only lets rank 0 tell a rank of
/// another job apart in its messages, and a welcome be checked cheaply.
constexpr std::uint64_t job_tag(std::string_view token) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](std::string_view s) {
    for (const char c : s) {
      h ^= static_cast<std::uint8_t>(c);
      h *= 0x100000001b3ull;
    }
  };
  mix("chorus-job-token-v1:");
  mix(token);
  return h;
}

}  // namespace chorus::core::frame
