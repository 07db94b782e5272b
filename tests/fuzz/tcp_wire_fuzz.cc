// libFuzzer target: the TCP transport's wire decoders (transports/tcp/tcp_wire.h):
// data frame headers with the receiver's checks, the handshake messages and
// the address blob. The first byte picks the receiver's state (expected
// sequence number, socket count); the rest is read as consecutive 24-byte
// headers and as each handshake message. Checked: a header that passes
// check_message_header is within the limits the receiver sizes buffers from,
// stripe geometry stays inside the message, and decode/encode round-trips.
#include "transports/tcp/tcp_wire.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace wire = chorus::tcp::wire;

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

template <std::size_t N>
bool take(const std::uint8_t*& data, std::size_t& size, std::array<std::byte, N>& out) {
  if (size < N) return false;
  std::memcpy(out.data(), data, N);
  data += N;
  size -= N;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const int sockets = 1 + (data[0] & 0x0f);
  const std::uint32_t seq = data[0] >> 4;
  const std::uint8_t* rest = data + 1;
  std::size_t left = size - 1;

  // Blob: any length, straight from the peer through the core.
  wire::Blob blob;
  if (wire::decode(rest, left, blob)) {
    check(left == wire::kBlobSize && blob.port != 0 && (blob.family == 4 || blob.family == 6));
    std::array<std::byte, wire::kBlobSize> again{};
    wire::encode(blob, again.data());
    check(std::memcmp(again.data(), rest, wire::kBlobSize) == 0);
  }

  const std::uint8_t* p = rest;
  std::size_t n = left;
  wire::HelloBytes hb;
  if (take(p, n, hb)) {
    wire::Hello h;
    if (wire::decode(hb, h)) {
      wire::HelloBytes again;
      wire::encode(h, again);
      check(again == hb);
    }
  }
  p = rest;
  n = left;
  wire::ChallengeBytes cb;
  if (take(p, n, cb)) {
    wire::Challenge c;
    if (wire::decode(cb, c)) {
      wire::ChallengeBytes again;
      wire::encode(c, again);
      check(again == cb);
    }
  }
  p = rest;
  n = left;
  wire::ProofBytes pb;
  if (take(p, n, pb)) {
    wire::Proof f;
    if (wire::decode(pb, f)) {
      wire::ProofBytes again;
      wire::encode(f, again);
      check(again == pb);
    }
  }
  p = rest;
  n = left;
  wire::AckBytes ab;
  if (take(p, n, ab)) {
    wire::AckStatus s;
    if (wire::decode(ab, s)) check(s <= wire::AckStatus::kDuplicate);
  }

  // Data stream: consecutive frame headers as the receiver would meet them.
  p = rest;
  n = left;
  wire::FrameBytes fb;
  std::uint32_t expected = seq;
  while (take(p, n, fb)) {
    wire::FrameHeader h;
    if (!wire::decode(fb, h)) break;
    if (h.kind == wire::FrameKind::kStripe) {
      const wire::Part part = wire::stripe_part(h.length, h.stripes, h.index);
      check(part.begin <= h.length && part.size <= h.length - part.begin);
      (void)wire::stripe_header_matches(h, h.index, expected, h.stripes, h.imm, part.size);
      continue;
    }
    if (wire::check_message_header(h, expected, sockets) != nullptr) break;
    check(h.length <= wire::kMaxMessageSize && h.stripes >= 1 &&
          static_cast<int>(h.stripes) <= sockets);
    std::uint64_t covered = 0;
    for (unsigned i = 0; i < h.stripes; ++i) {
      const wire::Part part = wire::stripe_part(h.length, h.stripes, i);
      check(part.begin == covered || part.size == 0);
      check(part.begin + part.size <= h.length);
      covered += part.size;
    }
    check(covered == h.length);
    wire::FrameBytes again;
    wire::encode(h, again);
    check(again == fb);
    ++expected;
  }
  return 0;
}
