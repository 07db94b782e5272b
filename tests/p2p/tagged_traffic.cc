// Case "traffic" of tagged_check: collectives and untagged send/recv
// between the posts of tagged exchanges, many operations in flight at once,
// and more sends in flight to one peer than a transport endpoint takes.
#include "tagged_harness.h"

#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace chorus::p2p_test {

void case_traffic() {
  const int n = g_size;
  for (int round = 0; round < 2; ++round) {
    const uint64_t salt = 4000 + uint64_t(round) * 100;
    auto dtype_with = [&](int src, int dst) {
      return kDtypes[size_t(src + dst + round) % kDtypeCount];
    };
    auto count_with = [&](int src, int dst) {
      const int dt = dtype_with(src, dst);
      return sizes_for(dt)[size_t(src * 2 + dst + round * 3) % kSizeCount].count;
    };

    // Tagged receives from every peer, then collectives and untagged
    // traffic, then the tagged sends (blocking).
    g_step = "receives, collectives and untagged traffic, sends; round " + std::to_string(round);
    {
      std::vector<In> ins;
      for (int d = 1; d < n; ++d) {
        const int p = (g_rank + d) % n;
        ins.push_back(make_in(dtype_with(p, g_rank), count_with(p, g_rank), p, 120 + round));
      }
      for (auto& in : ins) irecv(in);
      checked_all_reduce(300000 + size_t(round), round);
      checked_untagged_ring(5000, salt);
      checked_all_reduce(1000, round + 1);
      for (int d = n - 1; d >= 1; --d) {
        const int p = (g_rank + d) % n;
        Out o = make_out(dtype_with(g_rank, p), count_with(g_rank, p), p, 120 + round, salt);
        send(o);
      }
      for (auto& in : ins) {
        wait_recv(in);
        check_in(in, in.source, 120 + round, count_with(in.source, g_rank), salt);
      }
      barrier();
    }

    // Tagged sends to every peer first, then collectives and untagged
    // traffic (the messages arrive meanwhile), then blocking receives.
    g_step = "sends, collectives and untagged traffic, receives; round " + std::to_string(round);
    {
      std::vector<Out> outs;
      for (int d = 1; d < n; ++d) {
        const int p = (g_rank + d) % n;
        outs.push_back(make_out(dtype_with(g_rank, p), count_with(g_rank, p), p, 130, salt + 1));
      }
      for (auto& o : outs) isend(o);
      checked_untagged_ring(7000, salt + 2);
      checked_all_reduce(200000, round + 5);
      for (int d = n - 1; d >= 1; --d) {
        const int p = (g_rank + d) % n;
        In in = make_in(dtype_with(p, g_rank), count_with(p, g_rank), p, 130);
        recv(in);
        check_in(in, p, 130, count_with(p, g_rank), salt + 1);
      }
      for (auto& o : outs) wait_send(o);
      barrier();
    }
  }

  // A flood: more small sends in flight to one peer than a transport
  // endpoint takes at once (1024 outstanding sends for tcp and shm), then
  // the sender joins a barrier while its partner blocks in the receives,
  // one by one, before joining it. Everything the partner waits for must
  // still go out while the sender sits in the barrier.
  for (int round = 0; round < 2; ++round) {
    constexpr int kFlood = 1500;
    const Pair pr = pair_of(round);
    g_step = "1500 sends in flight, then a barrier, round " + std::to_string(round) +
             " with rank " + std::to_string(pr.peer);
    const uint64_t salt = 4500 + uint64_t(round) * kFlood;
    if (pr.peer >= 0 && pr.first) {
      std::vector<Out> outs;
      outs.reserve(kFlood);
      for (int m = 0; m < kFlood; ++m) {
        outs.push_back(make_out(CHORUS_INT32, 3, pr.peer, 210, salt + uint64_t(m)));
        isend(outs.back());
      }
      barrier();
      for (auto& o : outs) wait_send(o);
    } else {
      for (int m = 0; m < kFlood && pr.peer >= 0; ++m) {
        In in = make_in(CHORUS_INT32, 3, pr.peer, 210);
        recv(in);
        check_in(in, pr.peer, 210, 3, salt + uint64_t(m));
      }
      barrier();
    }
    barrier();
  }

  // 64 tagged operations in flight on every rank: 32 sends and 32 receives
  // spread over the peers, three tags shared so that order matters, sizes
  // across the eager limit (one multi-MiB message per pair), posted in a
  // shuffled order and waited in another. A rank's k-th posted send (or
  // receive) for a (peer, tag) carries (or takes) that pair's k-th message.
  g_step = "64 operations in flight";
  {
    constexpr int kOps = 32;
    constexpr int kTags = 3;
    const int dtype = CHORUS_FLOAT32;
    const size_t e = kEagerBytes / 4;
    const size_t counts[] = {0, 1, 17, 300, e - 1, e, e + 1, 3 * e + 5};
    // The tags of the messages `src` sends `dst`, in order (alike on both).
    auto tags_from = [&](int src, int dst) {
      const int d = (dst - src + n) % n;  // 1 .. n-1
      const int k = kOps / (n - 1) + (d - 1 < kOps % (n - 1) ? 1 : 0);
      std::vector<int> v;
      for (int j = 0; j < k; ++j)
        v.push_back(200 + int(mix(uint64_t(src * 131 + dst * 7 + j)) % kTags));
      return v;
    };
    // The size and content of the seq-th message with `tag` from src to dst.
    auto count_of = [&](int src, int dst, int tag, int seq) {
      return seq == 1 && tag == 200 && src < dst ? kBigBytes / 4
                                                 : counts[size_t(src + 3 * dst + tag + seq) % 8];
    };
    auto salt_of = [](int tag, int seq) { return uint64_t(5000 + tag * 64 + seq); };
    struct Op {
      bool is_send;
      int peer;
      int tag;
      int seq = 0;
    };
    std::vector<Op> ops;
    for (int d = 1; d < n; ++d) {
      const int p = (g_rank + d) % n;
      for (int t : tags_from(g_rank, p)) ops.push_back({true, p, t});
      for (int t : tags_from(p, g_rank)) ops.push_back({false, p, t});
    }
    shuffle(ops, 77 + uint64_t(g_rank));
    std::map<std::tuple<bool, int, int>, int> next;
    for (Op& op : ops) op.seq = next[{op.is_send, op.peer, op.tag}]++;
    expect(ops.size() == 2 * kOps, "64 operations: built " + std::to_string(ops.size()));
    std::vector<Out> outs;
    std::vector<In> ins;
    outs.reserve(ops.size());
    ins.reserve(ops.size());
    std::vector<std::pair<bool, size_t>> posted;  // (is_send, index)
    for (const Op& op : ops) {
      if (op.is_send) {
        outs.push_back(make_out(dtype, count_of(g_rank, op.peer, op.tag, op.seq), op.peer, op.tag,
                                salt_of(op.tag, op.seq)));
        isend(outs.back());
        posted.push_back({true, outs.size() - 1});
      } else {
        ins.push_back(make_in(dtype, count_of(op.peer, g_rank, op.tag, op.seq), op.peer, op.tag));
        irecv(ins.back());
        posted.push_back({false, ins.size() - 1});
      }
    }
    std::vector<size_t> wait_order(posted.size());
    for (size_t i = 0; i < wait_order.size(); ++i) wait_order[i] = i;
    shuffle(wait_order, 99 + uint64_t(g_rank));
    for (size_t w : wait_order) {
      if (posted[w].first)
        wait_send(outs[posted[w].second]);
      else
        wait_recv(ins[posted[w].second]);
    }
    size_t k = 0;
    for (const Op& op : ops)
      if (!op.is_send) {
        check_in(ins[k++], op.peer, op.tag, count_of(op.peer, g_rank, op.tag, op.seq),
                 salt_of(op.tag, op.seq));
      }
    barrier();
  }
}

}  // namespace chorus::p2p_test
