// Cases "tags" and "any" of tagged_check: matching on (source, tag), the
// order of messages that one receive could take, CHORUS_ANY_TAG and
// CHORUS_ANY_SOURCE, and the status a receive reports.
#include "tagged_harness.h"

#include <string>
#include <vector>

namespace chorus::p2p_test {

// ---- case: tags ----

void case_tags() {
  for (int round = 0; round < 4; ++round) {
    const Pair pr = pair_of(round);
    const int dtype = kDtypes[size_t(round) % kDtypeCount];
    const std::vector<Size> sizes = sizes_for(dtype);
    const uint64_t salt = 2000 + uint64_t(round) * 100;
    const bool sender = pr.peer >= 0 && pr.first;
    const bool receiver = pr.peer >= 0 && !pr.first;
    const int peer = pr.peer;

    // Distinct tags, each size once, received in a shuffled order: round 0
    // with the sends issued first and blocking receives, round 1 with the
    // receives posted first (in reverse) and blocking sends, rounds 2-3 the
    // same with the sizes' order reversed.
    g_step = "distinct tags, round " + std::to_string(round) + " with rank " + std::to_string(peer);
    std::vector<size_t> idx(kSizeCount);
    for (size_t j = 0; j < kSizeCount; ++j) idx[j] = round >= 2 ? kSizeCount - 1 - j : j;
    auto tag_of = [](size_t j) { return 40 + 3 * int(j); };
    std::vector<size_t> perm = idx;
    shuffle(perm, salt + 7);
    if (round % 2 == 0) {
      if (sender) {
        std::vector<Out> outs;
        for (size_t j : idx) outs.push_back(make_out(dtype, sizes[j].count, peer, tag_of(j), salt));
        for (auto& o : outs) isend(o);
        for (size_t k = outs.size(); k-- > 0;) wait_send(outs[k]);
      } else if (receiver) {
        for (size_t j : perm) {
          In in = make_in(dtype, sizes[j].count, peer, tag_of(j));
          recv(in);
          check_in(in, peer, tag_of(j), sizes[j].count, salt);
        }
      }
      barrier();
    } else {
      std::vector<In> ins(kSizeCount);
      if (receiver) {
        for (size_t k = idx.size(); k-- > 0;) {
          const size_t j = idx[k];
          ins[j] = make_in(dtype, sizes[j].count, peer, tag_of(j));
          irecv(ins[j]);
        }
      }
      barrier();
      if (sender) {
        for (size_t j : idx) {
          Out o = make_out(dtype, sizes[j].count, peer, tag_of(j), salt);
          send(o);
        }
      } else if (receiver) {
        for (size_t j : perm) {
          wait_recv(ins[j]);
          check_in(ins[j], peer, tag_of(j), sizes[j].count, salt);
        }
      }
      barrier();
    }

    // One tag, 12 messages of every size in turn (eager and rendezvous
    // interleaved): received in the order sent. Even rounds: sends first,
    // then a barrier, then blocking receives. Odd rounds: receives first,
    // waited in reverse order.
    g_step =
        "one tag 12 times, round " + std::to_string(round) + " with rank " + std::to_string(peer);
    constexpr int kSame = 12, kSameTag = 60;
    const size_t cap = sizes[kSizeCount - 1].count;
    auto count_of = [&](int m) { return sizes[size_t(m + round) % kSizeCount].count; };
    if (round % 2 == 0) {
      std::vector<Out> outs;
      if (sender) {
        for (int m = 0; m < kSame; ++m)
          outs.push_back(make_out(dtype, count_of(m), peer, kSameTag, salt + 10 + uint64_t(m)));
        for (auto& o : outs) isend(o);
      }
      barrier();
      if (receiver)
        for (int m = 0; m < kSame; ++m) {
          In in = make_in(dtype, cap, peer, kSameTag);
          recv(in);
          check_in(in, peer, kSameTag, count_of(m), salt + 10 + uint64_t(m));
        }
      for (auto& o : outs) wait_send(o);
    } else {
      std::vector<In> ins;
      if (receiver) {
        for (int m = 0; m < kSame; ++m) ins.push_back(make_in(dtype, cap, peer, kSameTag));
        for (auto& in : ins) irecv(in);
      }
      barrier();
      if (sender)
        for (int m = 0; m < kSame; ++m) {
          Out o = make_out(dtype, count_of(m), peer, kSameTag, salt + 10 + uint64_t(m));
          if (m % 2)
            send(o);
          else
            isend(o), wait_send(o);
        }
      for (int m = kSame; m-- > 0 && receiver;) {
        wait_recv(ins[size_t(m)]);
        check_in(ins[size_t(m)], peer, kSameTag, count_of(m), salt + 10 + uint64_t(m));
      }
    }
    barrier();

    // CHORUS_ANY_TAG takes the oldest message: tags sent out of numeric
    // order, one repeated, sizes across the eager limit. Even rounds: sent
    // first, received with (peer, any tag); odd rounds: (any source, any
    // tag) receives posted first.
    g_step = "any tag takes the oldest, round " + std::to_string(round) + " with rank " +
             std::to_string(peer);
    const int any_tags[] = {70, 64, 77, 61, 70};
    const size_t any_counts[] = {sizes[4].count, sizes[1].count, sizes[5].count, sizes[0].count,
                                 sizes[3].count};
    if (round % 2 == 0) {
      std::vector<Out> outs;
      if (sender) {
        for (int m = 0; m < 5; ++m)
          outs.push_back(
              make_out(dtype, any_counts[m], peer, any_tags[m], salt + 30 + uint64_t(m)));
        for (auto& o : outs) isend(o);
      }
      barrier();
      if (receiver)
        for (int m = 0; m < 5; ++m) {
          In in = make_in(dtype, cap, peer, CHORUS_ANY_TAG);
          recv(in);
          check_in(in, peer, any_tags[m], any_counts[m], salt + 30 + uint64_t(m));
        }
      for (auto& o : outs) wait_send(o);
    } else {
      std::vector<In> ins;
      if (receiver) {
        for (int m = 0; m < 5; ++m)
          ins.push_back(make_in(dtype, cap, CHORUS_ANY_SOURCE, CHORUS_ANY_TAG));
        for (auto& in : ins) irecv(in);
      }
      barrier();
      if (sender)
        for (int m = 0; m < 5; ++m) {
          Out o = make_out(dtype, any_counts[m], peer, any_tags[m], salt + 30 + uint64_t(m));
          send(o);
        }
      for (int m = 0; m < 5 && receiver; ++m) {
        wait_recv(ins[size_t(m)]);
        check_in(ins[size_t(m)], peer, any_tags[m], any_counts[m], salt + 30 + uint64_t(m));
      }
    }
    barrier();

    // Any tag among specific ones: receives (tag 81), (any tag), (tag 80)
    // posted first; messages tag 80, 81, 80 then go to the any-tag receive,
    // the tag-81 one and the tag-80 one.
    g_step = "any tag between specific tags, round " + std::to_string(round) + " with rank " +
             std::to_string(peer);
    const size_t c = sizes[size_t(round) % 2 ? 4 : 2].count;
    std::vector<In> ins;
    if (receiver) {
      ins.push_back(make_in(dtype, c, peer, 81));
      ins.push_back(make_in(dtype, c, peer, CHORUS_ANY_TAG));
      ins.push_back(make_in(dtype, c, peer, 80));
      for (auto& in : ins) irecv(in);
    }
    barrier();
    if (sender) {
      Out m0 = make_out(dtype, c, peer, 80, salt + 50),
          m1 = make_out(dtype, c, peer, 81, salt + 51),
          m2 = make_out(dtype, c, peer, 80, salt + 52);
      isend(m0), isend(m1), isend(m2);
      wait_send(m2), wait_send(m1), wait_send(m0);
    } else if (receiver) {
      for (auto& in : ins) wait_recv(in);
      check_in(ins[0], peer, 81, c, salt + 51);
      check_in(ins[1], peer, 80, c, salt + 50);
      check_in(ins[2], peer, 80, c, salt + 52);
    }
    barrier();
  }
}

// ---- case: any source ----

namespace {

/// Receives that took messages from several senders, each sender's
/// messages numbered from 0 in the order it sent them (salt + number):
/// every message is taken once, and a sender's messages land in the
/// receives in the order those were posted.
void check_any(std::vector<In>& ins, int root, int tag_base, bool tag_per_source, size_t count,
               uint64_t salt, const std::vector<int>& expected_per_source) {
  std::vector<int> taken(size_t(g_size), 0);
  for (auto& in : ins) {
    if (!in.ok) continue;
    const int src = in.st.source;
    if (src < 0 || src >= g_size || src == root) {
      expect(false, recv_text(in) + ": status.source " + std::to_string(src) + " is not a sender");
      continue;
    }
    const int tag = tag_per_source ? tag_base + src : tag_base;
    const int seq = taken[size_t(src)]++;
    check_in(in, src, tag, count, salt + uint64_t(seq));
  }
  for (int r = 0; r < g_size; ++r)
    expect(taken[size_t(r)] == expected_per_source[size_t(r)],
           "rank " + std::to_string(r) + "'s messages taken " + std::to_string(taken[size_t(r)]) +
               " times, expected " + std::to_string(expected_per_source[size_t(r)]));
}

}  // namespace

void case_any() {
  int round = 0;
  for (int root_i = 0; root_i < 2; ++root_i) {
    const int root = root_i == 0 ? 0 : g_size - 1;
    const std::vector<int> one_each = [&] {
      std::vector<int> v(size_t(g_size), 1);
      v[size_t(root)] = 0;
      return v;
    }();
    for (size_t j = 0; j < kSizeCount; ++j, ++round) {
      const int dtype = kDtypes[(j + size_t(root_i) * 3) % kDtypeCount];
      const size_t count = sizes_for(dtype)[j].count;
      const std::string sz = size_text(sizes_for(dtype)[j].label, count, dtype);
      const uint64_t salt = 3000 + uint64_t(round) * 10;
      const int others = g_size - 1;

      // Sends first, then blocking any-source receives at the root.
      g_step = "any source, sends first, root " + std::to_string(root) + ", size " + sz;
      {
        Out o;
        if (g_rank != root) {
          o = make_out(dtype, count, root, 90, salt);
          isend(o);
        }
        std::vector<In> ins;
        if (g_rank == root)
          for (int m = 0; m < others; ++m) {
            ins.push_back(make_in(dtype, count, CHORUS_ANY_SOURCE, 90));
            recv(ins.back());
          }
        if (g_rank == root) check_any(ins, root, 90, false, count, salt, one_each);
        wait_send(o);
        barrier();
      }

      // Any-source receives posted first, waited in reverse; blocking sends.
      g_step = "any source, receives first, root " + std::to_string(root) + ", size " + sz;
      {
        std::vector<In> ins;
        if (g_rank == root) {
          for (int m = 0; m < others; ++m)
            ins.push_back(make_in(dtype, count, CHORUS_ANY_SOURCE, 91));
          for (auto& in : ins) irecv(in);
        }
        barrier();
        if (g_rank != root) {
          Out o = make_out(dtype, count, root, 91, salt + 1);
          send(o);
        } else {
          for (size_t k = ins.size(); k-- > 0;) wait_recv(ins[k]);
          check_any(ins, root, 91, false, count, salt + 1, one_each);
        }
        barrier();
      }

      // Any source and any tag; each sender's tag is 100 + its rank.
      g_step = "any source and tag, root " + std::to_string(root) + ", size " + sz;
      {
        Out o;
        if (g_rank != root) {
          o = make_out(dtype, count, root, 100 + g_rank, salt + 2);
          isend(o);
        }
        std::vector<In> ins;
        if (g_rank == root) {
          for (int m = 0; m < others; ++m)
            ins.push_back(make_in(dtype, count, CHORUS_ANY_SOURCE, CHORUS_ANY_TAG));
          for (auto& in : ins) irecv(in);
          for (auto& in : ins) wait_recv(in);
          check_any(ins, root, 100, true, count, salt + 2, one_each);
        }
        wait_send(o);
        barrier();
      }

      // Specific and any-source receives mixed. The rank after the root
      // (`two`) sends two messages, the others one. Even sizes: the
      // receive from `two` is posted first and must take its first
      // message. Odd sizes: an any-source receive is posted before it, so
      // which receive takes what depends on arrival; the invariants still
      // hold (each message once, each sender's in order).
      g_step = "specific and any source mixed, root " + std::to_string(root) + ", size " + sz;
      {
        const int two = (root + 1) % g_size;
        std::vector<int> expected = one_each;
        expected[size_t(two)] = 2;
        std::vector<In> ins;
        int specific = -1;
        if (g_rank == root) {
          for (int m = 0; m < g_size; ++m)
            ins.push_back(make_in(dtype, count, CHORUS_ANY_SOURCE, 92));
          specific = j % 2 == 0 ? 0 : 1;
          ins[size_t(specific)].source = two;
          for (auto& in : ins) irecv(in);
        }
        barrier();
        if (g_rank != root) {
          Out o0 = make_out(dtype, count, root, 92, salt + 3);
          isend(o0);
          Out o1;
          if (g_rank == two) {
            o1 = make_out(dtype, count, root, 92, salt + 4);
            send(o1);
          }
          wait_send(o0);
        } else {
          for (auto& in : ins) wait_recv(in);
          if (ins[size_t(specific)].ok)
            expect(ins[size_t(specific)].st.source == two,
                   "the receive from rank " + std::to_string(two) + " got rank " +
                       std::to_string(ins[size_t(specific)].st.source) + "'s message");
          if (specific == 0) check_in(ins[0], two, 92, count, salt + 3);
          check_any(ins, root, 92, false, count, salt + 3, expected);
        }
        barrier();
      }
    }
  }
}

}  // namespace chorus::p2p_test
