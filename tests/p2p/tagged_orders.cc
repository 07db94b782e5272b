// Case "orders" of tagged_check: every posting order of a pair, one way
// and both ways, blocking and non-blocking, at every size.
#include "tagged_harness.h"

#include <cstdio>
#include <iterator>
#include <string>

namespace chorus::p2p_test {

// ---- case: orders ----

namespace {

/// A posting order of a pair. Names read "what is posted first | what
/// orders the two ranks | what is posted late"; "both:" orders run the same
/// code on both ranks, each sending the other a message.
struct Order {
  const char* name;
  int barriers;            // barriers every rank joins in the middle (idle ranks too)
  bool eager_only;         // a blocking send waits for its receive above the eager size
  void (*a)(const Step&);  // the first rank of the pair
  void (*b)(const Step&);  // the second
};

const Order kOrders[] = {
    // One way: a sends, b receives.
    {"isend | barrier | irecv", 1, false,
     [](const Step& s) {
       Out o = s.out();
       isend(o);
       barrier();
       wait_send(o);
     },
     [](const Step& s) {
       barrier();
       In i = s.in();
       irecv(i);
       wait_recv(i);
       s.check(i);
     }},
    {"irecv | barrier | isend", 1, false,
     [](const Step& s) {
       barrier();
       Out o = s.out();
       isend(o);
       wait_send(o);
     },
     [](const Step& s) {
       In i = s.in();
       irecv(i);
       barrier();
       wait_recv(i);
       s.check(i);
     }},
    {"isend | barrier | recv", 1, false,
     [](const Step& s) {
       Out o = s.out();
       isend(o);
       barrier();
       wait_send(o);
     },
     [](const Step& s) {
       barrier();
       In i = s.in();
       recv(i);
       s.check(i);
     }},
    {"irecv | barrier | send", 1, false,
     [](const Step& s) {
       barrier();
       Out o = s.out();
       send(o);
     },
     [](const Step& s) {
       In i = s.in();
       irecv(i);
       barrier();
       wait_recv(i);
       s.check(i);
     }},
    {"send | barrier | recv", 1, true,
     [](const Step& s) {
       Out o = s.out();
       send(o);
       barrier();
     },
     [](const Step& s) {
       barrier();
       In i = s.in();
       recv(i);
       s.check(i);
     }},
    {"send | barrier | irecv", 1, true,
     [](const Step& s) {
       Out o = s.out();
       send(o);
       barrier();
     },
     [](const Step& s) {
       barrier();
       In i = s.in();
       irecv(i);
       wait_recv(i);
       s.check(i);
     }},
    {"send (announced) | irecv late", 0, false,
     [](const Step& s) {
       Out m = marker_out(s.peer, s.salt);
       isend(m);
       Out o = s.out();
       send(o);
       wait_send(m);
     },
     [](const Step& s) {
       take_marker(s.peer, s.salt);
       In i = s.in();
       irecv(i);
       wait_recv(i);
       s.check(i);
     }},
    {"send (announced) | recv late", 0, false,
     [](const Step& s) {
       Out m = marker_out(s.peer, s.salt);
       isend(m);
       Out o = s.out();
       send(o);
       wait_send(m);
     },
     [](const Step& s) {
       take_marker(s.peer, s.salt);
       In i = s.in();
       recv(i);
       s.check(i);
     }},
    {"isend late | recv (announced)", 0, false,
     [](const Step& s) {
       take_marker(s.peer, s.salt);
       Out o = s.out();
       isend(o);
       wait_send(o);
     },
     [](const Step& s) {
       Out m = marker_out(s.peer, s.salt);
       isend(m);
       In i = s.in();
       recv(i);
       wait_send(m);
       s.check(i);
     }},
    {"send late | recv (announced)", 0, false,
     [](const Step& s) {
       take_marker(s.peer, s.salt);
       Out o = s.out();
       send(o);
     },
     [](const Step& s) {
       Out m = marker_out(s.peer, s.salt);
       isend(m);
       In i = s.in();
       recv(i);
       wait_send(m);
       s.check(i);
     }},
    // Rendezvous, not unbounded buffering: above the eager size the send
    // cannot be complete while no receive is posted.
    {"isend | barrier | test | barrier | irecv", 2, false,
     [](const Step& s) {
       Out o = s.out();
       isend(o);
       barrier();
       int done = -1;
       expect_rc(chorus_test(o.req, &done), CHORUS_OK, "chorus_test of i" + send_text(o));
       if (!is_eager(s.dtype, s.count))
         expect(done == 0, "i" + send_text(o) +
                               " above the eager size completed before its receive was posted");
       barrier();
       wait_send(o);
     },
     [](const Step& s) {
       barrier();
       barrier();
       In i = s.in();
       irecv(i);
       wait_recv(i);
       s.check(i);
     }},
    // Both ways: each rank sends the other a message with the same tag.
    {"both: isend, irecv; wait send, recv", 0, false,
     [](const Step& s) {
       Out o = s.out();
       In i = s.in();
       isend(o), irecv(i), wait_send(o), wait_recv(i);
       s.check(i);
     },
     nullptr},
    {"both: isend, irecv; wait recv, send", 0, false,
     [](const Step& s) {
       Out o = s.out();
       In i = s.in();
       isend(o), irecv(i), wait_recv(i), wait_send(o);
       s.check(i);
     },
     nullptr},
    {"both: irecv, isend; wait recv, send", 0, false,
     [](const Step& s) {
       Out o = s.out();
       In i = s.in();
       irecv(i), isend(o), wait_recv(i), wait_send(o);
       s.check(i);
     },
     nullptr},
    {"both: irecv, isend; wait send, recv", 0, false,
     [](const Step& s) {
       Out o = s.out();
       In i = s.in();
       irecv(i), isend(o), wait_send(o), wait_recv(i);
       s.check(i);
     },
     nullptr},
    {"both: irecv, send, wait recv", 0, false,
     [](const Step& s) {
       Out o = s.out();
       In i = s.in();
       irecv(i), send(o), wait_recv(i);
       s.check(i);
     },
     nullptr},
    {"both: isend, recv, wait send", 0, false,
     [](const Step& s) {
       Out o = s.out();
       In i = s.in();
       isend(o), recv(i), wait_send(o);
       s.check(i);
     },
     nullptr},
    {"both: send, recv", 0, true,
     [](const Step& s) {
       Out o = s.out();
       In i = s.in();
       send(o), recv(i);
       s.check(i);
     },
     nullptr},
    {"both: isend | barrier | recv, wait send", 1, false,
     [](const Step& s) {
       Out o = s.out();
       In i = s.in();
       isend(o), barrier(), recv(i), wait_send(o);
       s.check(i);
     },
     nullptr},
    {"both: irecv | barrier | send, wait recv", 1, false,
     [](const Step& s) {
       Out o = s.out();
       In i = s.in();
       irecv(i), barrier(), send(o), wait_recv(i);
       s.check(i);
     },
     nullptr},
    {"a: isend, recv, wait; b: irecv, send, wait", 0, false,
     [](const Step& s) {
       Out o = s.out();
       In i = s.in();
       isend(o), recv(i), wait_send(o);
       s.check(i);
     },
     [](const Step& s) {
       Out o = s.out();
       In i = s.in();
       irecv(i), send(o), wait_recv(i);
       s.check(i);
     }},
    {"a: send, recv; b: recv, send", 0, false,
     [](const Step& s) {
       Out o = s.out();
       In i = s.in();
       send(o), recv(i);
       s.check(i);
     },
     [](const Step& s) {
       Out o = s.out();
       In i = s.in();
       recv(i), send(o);
       s.check(i);
     }},
};

}  // namespace

void case_orders() {
  int round = 0;
  for (size_t k = 0; k < std::size(kOrders); ++k) {
    const Order& ord = kOrders[k];
    for (size_t j = 0; j < kSizeCount; ++j, ++round) {
      const int dtype = kDtypes[(k + j) % kDtypeCount];
      const Size sz = sizes_for(dtype)[j];
      const Pair pr = pair_of(round);
      g_step =
          std::string("order '") + ord.name + "' size " + size_text(sz.label, sz.count, dtype) +
          (pr.peer < 0
               ? std::string(", sitting out")
               : std::string(pr.first ? ", a" : ", b") + " with rank " + std::to_string(pr.peer));
      if (ord.eager_only && !is_eager(dtype, sz.count)) {
        // A blocking send above the eager size returns once its receive is
        // matched; MPI does not promise more (MPI_Send may block too).
        if (g_rank == 0)
          std::printf(
              "order '%s' not run at size %s: blocking sends before any receive are "
              "only safe up to the eager size\n",
              ord.name, sz.label);
        continue;
      }
      const Step s{pr.peer, dtype, sz.count, 16 + int(k), uint64_t(1000 + round)};
      if (pr.peer < 0)
        for (int b = 0; b < ord.barriers; ++b) barrier();
      else if (pr.first || !ord.b)
        ord.a(s);
      else
        ord.b(s);
      barrier();
    }
  }
}

}  // namespace chorus::p2p_test
