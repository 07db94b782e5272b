// The notice protocol's wire layout and work-request ids, shared by
// peer_notices.cc and signature_exchange.cc (both send and receive notices
// on the notice endpoints: ring neighbours and data peers, notice_relay.h).
// Private to the core.
#pragma once

#include "core/call_signature.h"

#include <cstddef>
#include <cstdint>

namespace chorus::core {

// Version 2 ("CHN2" in memory on little-endian hosts): `reporter` is the
// rank the notice comes from, which differs from the sending peer once a
// neighbour relays it. Version 1 ("CHSN") had no relay; a core of one
// version reads the other's notices as malformed and ignores them.
constexpr uint32_t kNoticeMagic = 0x324e'4843;
constexpr uint32_t kNoticePeerLost = 1;
constexpr uint32_t kNoticeFinalized = 2;
constexpr uint32_t kNoticeSignature = 3;  // `a`: the sender's call
constexpr uint32_t kNoticeMismatch = 4;   // `a`, `b`: the two calls that disagree
constexpr uint32_t kNoticeTimeout = 5;    // the sender timed out and is leaving
// `a`: the sender's call, as kNoticeSignature, and a request for the
// receiver's: the sender's data check found the receiver's digest wrong.
constexpr uint32_t kNoticeSignatureAsk = 6;
constexpr size_t kNoticeBytes = 128;
// Standing receives per peer: a peer is at most about one call ahead on a
// pair (a call does not return before it has the signatures it needs), so
// its signature for that call, a mismatch or timeout notice and its
// "finalized" notice fit with room to spare.
constexpr int kNoticeRecvSlots = 4;
constexpr int kSigSendSlots = 4;  // signature sends in flight per peer
// How long a rank that saw a peer's connections close waits for that peer's
// notice, and how long a failing rank spends sending its own.
constexpr int kNoticeGraceMs = 100;
// How long a rank whose data endpoint to a peer without a notice endpoint
// failed waits for a relayed notice that says why (the peer, or the rank
// the peer lost): relays cross several ranks, each when it next polls.
constexpr int kRelayGraceMs = 1000;
// How long a rank that found another call's digest in a peer's data waits for
// that peer's signature, to name both calls, before it names its own alone.
// Longer than kNoticeGraceMs: the peer may be busy moving a large message.
constexpr int kSuspectGraceMs = 1000;
// How long a rank that timed out waits for the other ranks' timeout notices
// before it names the ranks that sent none.
constexpr int kTimeoutGraceMs = 300;
// How long an orderly finalize waits for the peers' "finalized" notices.
// Ranks that end a job together finalize within milliseconds of each other;
// a peer that does not within this bound is left behind, and its transport
// may then report the closed connections.
constexpr int kFinalizeGraceMs = 1000;
// Notice work requests: kNoticeWrId + (peer << 8) + slot, where slot is a
// receive slot (< kNoticeRecvSlots), kSigSlotBase + a signature send slot,
// kRelaySlot for a notice relayed from another rank, or kBroadcastSlot for a
// notice this rank sends to every notice peer.
constexpr uint64_t kNoticeWrId = 0x6e6f'7469'6365'0000ull;  // "notice"
constexpr uint64_t kSigSlotBase = 0x80;
constexpr uint64_t kRelaySlot = 0xfe;
constexpr uint64_t kBroadcastSlot = 0xff;

// Frozen layout between the cores of one job (both ends run the same
// Chorus; the init fingerprint does not cover the version, see
// docs/reliability.md §4.5): 128 bytes, little-endian hosts. A relay
// forwards the 128 bytes unchanged.
struct NoticeWire {
  uint32_t magic;
  uint32_t kind;
  int32_t lost_rank;
  int32_t reporter;
  CallSig a;
  CallSig b;
};
static_assert(sizeof(NoticeWire) == kNoticeBytes);

}  // namespace chorus::core
