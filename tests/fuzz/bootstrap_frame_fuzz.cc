// libFuzzer target: the bootstrap side channel's wire decoder (core/frame.h).
//
// The input is treated as a byte stream from a peer and cut into frames the
// way the reader does; every frame's payload goes through its decoder. The
// invariants the reader relies on are checked: a header is refused or its
// length is within max_payload(type) before anything is sized from it; the
// decoder never claims more bytes than it was given; re-encoding a decoded
// payload gives back the same bytes.
#include "core/frame.h"

#include <cstddef>
#include <cstdint>
#include <span>

namespace frame = chorus::core::frame;

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

void decode_payload(frame::Type type, std::span<const std::byte> p) {
  switch (type) {
    case frame::Type::kHello:
      if (auto h = frame::decode_hello(p)) {
        const auto again = frame::encode_hello(*h);
        check(std::equal(again.begin(), again.end(), p.begin()));
      }
      break;
    case frame::Type::kWelcome:
      if (auto w = frame::decode_welcome(p)) {
        const auto again = frame::encode_welcome(*w);
        check(std::equal(again.begin(), again.end(), p.begin()));
      }
      break;
    case frame::Type::kAbort:
      if (auto a = frame::decode_abort(p)) {
        check(a->text.size() + frame::kAbortFixedSize == p.size());
        (void)frame::encode_abort(a->code, a->text);
      }
      break;
    case frame::Type::kContribute:
    case frame::Type::kDeliver:
    case frame::Type::kPass:
      if (auto op = frame::decode_op(p)) {
        check(p.size() >= frame::kOpHeaderSize);
        (void)frame::op_name(op->op);
      }
      break;
    case frame::Type::kAuthInit:
      if (auto a = frame::decode_auth_init(p)) check(p.size() >= frame::kAuthInitSize);
      break;
    case frame::Type::kAuthChallenge:
      if (auto c = frame::decode_auth_challenge(p)) {
        const auto again = frame::encode_auth_challenge(*c);
        check(std::equal(again.begin(), again.end(), p.begin()));
      }
      break;
    case frame::Type::kAuthProof:
      if (auto a = frame::decode_auth_proof(p)) check(p.size() >= frame::kAuthProofSize);
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  while (!in.empty()) {
    const frame::Decoded d = frame::decode_frame(in);
    if (d.state == frame::DecodeState::kError) {
      check(d.error != frame::Error::kNone);
      (void)frame::describe(d.error, d.header);
      break;
    }
    if (d.state == frame::DecodeState::kNeedMore) {
      check(d.needed > in.size());
      if (in.size() >= frame::kHeaderSize) {
        const auto type = static_cast<frame::Type>(d.header.type);
        check(d.needed == frame::kHeaderSize + d.header.length);
        check(d.header.length <= frame::max_payload(type));
      }
      break;
    }
    check(d.consumed >= frame::kHeaderSize && d.consumed <= in.size());
    const auto type = static_cast<frame::Type>(d.header.type);
    check(d.payload.size() <= frame::max_payload(type));
    decode_payload(type, d.payload);
    in = in.subspan(d.consumed);
  }
  return 0;
}
