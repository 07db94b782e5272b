// Unit tests of the call-signature matching (core/call_signature.h): no I/O.
#include "core/call_signature.h"

#include <chorus/chorus.h>

#include <catch2/catch.hpp>

#include <cstring>

using chorus::core::CallSig;
using chorus::core::describe_mismatch;
using chorus::core::signatures_agree;
using chorus::core::SigStream;

namespace {

CallSig collective(int rank, int coll, uint64_t seq, uint64_t count, int dtype, int op,
                   int root = -1, const char* algo = "ring") {
  CallSig s;
  s.rank = rank, s.call = coll, s.seq = seq, s.count = count, s.dtype = dtype, s.op = op;
  s.root = root;
  std::strncpy(s.algo, algo, sizeof(s.algo) - 1);
  return s;
}

CallSig p2p(int rank, bool send, uint64_t bytes, int peer) {
  CallSig s;
  s.rank = rank, s.call = send ? CallSig::kSigSend : CallSig::kSigRecv, s.count = bytes;
  s.peer = peer;
  return s;
}

}  // namespace

TEST_CASE("the message names both ranks and both calls, lower rank first") {
  auto ar = collective(0, CHORUS_COLL_ALL_REDUCE, 3, 1024, CHORUS_FLOAT32, CHORUS_SUM);
  auto ag = collective(2, CHORUS_COLL_ALL_GATHER, 3, 1024, CHORUS_UINT8, -1);
  const std::string want =
      "rank 0 called all_reduce(count=1024, float32, sum) but rank 2 called "
      "all_gather(count=1024, uint8)";
  CHECK(describe_mismatch(ar, ag) == want);
  CHECK(describe_mismatch(ag, ar) == want);
  CHECK_FALSE(signatures_agree(ar, ag));
}

TEST_CASE(
    "every field of a collective counts; the algorithm or call number is named when "
    "nothing else differs") {
  auto a = collective(1, CHORUS_COLL_BROADCAST, 7, 10, CHORUS_INT32, -1, 0);
  CHECK(signatures_agree(a, collective(2, CHORUS_COLL_BROADCAST, 7, 10, CHORUS_INT32, -1, 0)));
  CHECK_FALSE(
      signatures_agree(a, collective(2, CHORUS_COLL_BROADCAST, 7, 10, CHORUS_INT32, -1, 1)));
  CHECK_FALSE(
      signatures_agree(a, collective(2, CHORUS_COLL_BROADCAST, 7, 11, CHORUS_INT32, -1, 0)));
  CHECK_FALSE(
      signatures_agree(a, collective(2, CHORUS_COLL_BROADCAST, 8, 10, CHORUS_INT32, -1, 0)));
  auto mesh = collective(2, CHORUS_COLL_BROADCAST, 7, 10, CHORUS_INT32, -1, 0, "mesh");
  CHECK_FALSE(signatures_agree(a, mesh));
  CHECK(describe_mismatch(a, mesh) ==
        "rank 1 called broadcast(count=10, int32, root=0, algorithm ring) but rank 2 called "
        "broadcast(count=10, int32, root=0, algorithm mesh)");
  auto later = collective(2, CHORUS_COLL_BROADCAST, 8, 10, CHORUS_INT32, -1, 0);
  CHECK(describe_mismatch(a, later) ==
        "rank 1 called broadcast(count=10, int32, root=0) as call #7 but rank 2 called "
        "broadcast(count=10, int32, root=0) as call #8");
  CHECK(collective(0, CHORUS_COLL_BARRIER, 0, 0, -1, -1).describe() == "barrier()");
}

TEST_CASE("a send meets a receive of the same size, nothing else") {
  CHECK(signatures_agree(p2p(0, true, 4096, 1), p2p(1, false, 4096, 0)));
  CHECK_FALSE(signatures_agree(p2p(0, true, 4096, 1), p2p(1, false, 2048, 0)));
  CHECK_FALSE(signatures_agree(p2p(0, true, 4096, 1), p2p(1, true, 4096, 0)));
  CHECK_FALSE(signatures_agree(p2p(0, true, 4096, 1), collective(1, CHORUS_COLL_ALL_REDUCE, 0, 1024,
                                                                 CHORUS_FLOAT32, CHORUS_SUM)));
  CHECK(describe_mismatch(p2p(0, true, 4096, 1), p2p(1, false, 2048, 0)) ==
        "rank 0 called send(4096 bytes to rank 1) but rank 1 called recv(2048 bytes from rank 0)");
}

TEST_CASE("a stream matches in order, whichever side arrives first") {
  SigStream s;
  CallSig a, b;
  s.mine.push_back(p2p(0, true, 8, 1));
  s.pushed = 1;
  CHECK(s.match(a, b));
  CHECK(s.matched == 0);
  s.theirs.push_back(p2p(1, false, 8, 0));
  s.theirs.push_back(p2p(1, false, 16, 0));
  CHECK(s.match(a, b));
  CHECK(s.matched == 1);
  CHECK(s.theirs.size() == 1);
  s.mine.push_back(p2p(0, true, 32, 1));
  CHECK_FALSE(s.match(a, b));
  CHECK(a.count == 32);
  CHECK(b.count == 16);
}

TEST_CASE("fused all_reduces agree only with the same calls fused the same way") {
  const uint64_t ab[] = {100, 200}, ba[] = {200, 100}, abc[] = {100, 100, 100};
  auto fused = [](int rank, const uint64_t* counts, size_t n) {
    auto s = collective(rank, CHORUS_COLL_ALL_REDUCE, 4, 300, CHORUS_INT32, CHORUS_SUM);
    s.root = int32_t(n);
    s.peer = int32_t(chorus::core::fused_digest(counts, n));
    return s;
  };
  CHECK(signatures_agree(fused(0, ab, 2), fused(1, ab, 2)));
  CHECK(chorus::core::signature_digest(fused(0, ab, 2)) ==
        chorus::core::signature_digest(fused(1, ab, 2)));
  // Same total, same number of calls, another split.
  CHECK_FALSE(signatures_agree(fused(0, ab, 2), fused(1, ba, 2)));
  CHECK(chorus::core::signature_digest(fused(0, ab, 2)) !=
        chorus::core::signature_digest(fused(1, ba, 2)));
  CHECK_FALSE(signatures_agree(fused(0, ab, 2), fused(1, abc, 3)));
  // Fused against one unfused all_reduce of the same total.
  auto plain = collective(1, CHORUS_COLL_ALL_REDUCE, 4, 300, CHORUS_INT32, CHORUS_SUM);
  CHECK_FALSE(signatures_agree(fused(0, ab, 2), plain));
  const std::string text = describe_mismatch(fused(0, ab, 2), plain);
  CHECK_THAT(text, Catch::Contains("fused from 2 grouped calls"));
  CHECK_THAT(text, Catch::Contains("rank 1 called all_reduce(count=300, int32, sum)"));
}
