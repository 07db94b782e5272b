// Tagged point-to-point (chorus_*_tagged): MPI-style matching on (source,
// tag) with any-source and any-tag receives, eager messages up to
// kEagerBytes and a rendezvous above it, on two endpoints per peer that no
// collective uses (a control endpoint with standing receive slots and a bulk
// endpoint for rendezvous data). On a transport with polled connects a
// pair's endpoints connect on first use (p2p_engine_connect.cc).
// Operations progress independently of the communicator's ordered stream:
// the stream's executor registers each one when it is issued and then
// drives every registered operation, alongside whatever collective runs
// (docs/embedding.md, "Tagged point-to-point").
//
// Threading: only the thread executing the communicator's stream touches an
// engine (the communicator serialises); the requests it completes are
// thread-safe.
#pragma once

#include <chorus/transport.h>

#include "core/deadline.h"
#include "core/status.h"
#include "core/user_memory.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace chorus::core {

class Request;

/// One tagged send or receive.
struct P2pOp {
  std::shared_ptr<Request> req;
  bool is_send = false;
  int peer = -1;  // a rank; a receive may have -1 (any source)
  int tag = -1;   // a receive may have -1 (any tag)
  // chorus_send/recv: matched in order per pair on a tag of their own, and
  // the sizes must be equal (a mismatch is the communicator's).
  bool ordered = false;
  uint64_t coll_pos = 0;  // collectives issued on the communicator before it
  int dtype = 0;
  std::byte* buf = nullptr;
  uint64_t bytes = 0;  // a send's length, a receive's capacity
  Deadline deadline = Deadline::never();
  // Filled in as it progresses.
  uint64_t seq = 0;  // a send's number among this rank's sends to `peer`
  int src = -1;      // a matched receive: the sender, its tag and length
  int src_tag = -1;
  uint64_t got = 0;
  size_t chunks = 0, chunks_done = 0;  // rendezvous data
  chorus_tp_mr_t* mr = nullptr;
  bool rendezvous = false;  // a send waiting for, or past, its clear-to-send
};

class P2pEngine {
 public:
  /// Bytes of one message header; a message of up to kEagerBytes travels
  /// with its header in one control slot.
  static constexpr size_t kHeaderBytes = 32;
  static constexpr size_t kSlotBytes = 8192;
  static constexpr size_t kEagerBytes = kSlotBytes - kHeaderBytes;
  /// Standing receives per peer on its control endpoint.
  static constexpr int kSlots = 4;

  struct Hooks {
    /// Completes an operation's request (counts, the p2p status).
    std::function<void(P2pOp&, Status)> finish;
    std::function<void(int level, const std::string&)> log;
    /// An ordered operation met a message (or a refusal) of another size:
    /// the status to fail it with. `theirs_bytes` is the peer's size.
    std::function<Status(const P2pOp&, int peer, uint64_t theirs_bytes)> mismatch;
    /// "rank r" or "rank r of comm id", for messages.
    std::string who;
    /// A pair's endpoints became connected (counted as endpoints.p2p_connected).
    std::function<void()> connected;
  };

  P2pEngine(const chorus_transport_plugin_v1_t* tp, chorus_tp_context_t* ctx,
            const chorus_tp_caps_t& caps, int rank, int size, Hooks hooks);
  ~P2pEngine();
  P2pEngine(const P2pEngine&) = delete;
  P2pEngine& operator=(const P2pEngine&) = delete;

  /// The control ([0]) and bulk ([1]) endpoint of every peer, null for self;
  /// the communicator opens and connects them.
  std::vector<chorus_tp_endpoint_t*>& endpoints(int kind) { return eps_[kind]; }
  /// Connect `peer`'s endpoints on first use (transport with
  /// CHORUS_TP_CAP_CONNECT_POLL): keeps the blob of endpoint `kind` for the
  /// polled connect instead of the communicator connecting it at init.
  void defer_connect(int peer, int kind, const std::byte* blob, size_t len);
  /// Registers the slots and posts the standing receives of every peer
  /// already connected (the others are armed when they connect).
  Status arm();
  /// Peers whose connection is being set up.
  bool connecting() const { return connecting_ > 0; }
  /// Polls the connections being set up, at most every kConnectPollGap:
  /// called from every poll of a running call (a collective may wait for
  /// a peer that waits for this rank's tagged message), where progress()
  /// does not run.
  void poll_connects();
  /// `peer` is known to be lost (the notice protocol): a pair not connected
  /// yet fails what waits for it (a connected one sees its own errors).
  void peer_lost(int peer, const Status& why);
  /// Whether `ep` is one of this engine's endpoints.
  bool owns(const chorus_tp_endpoint_t* ep) const { return ep_peer_.count(ep) != 0; }

  /// Registers an operation issued on the stream (a send posts at once).
  void start(std::shared_ptr<P2pOp> op);
  /// A completion on one of this engine's endpoints.
  void on_completion(const chorus_tp_completion_t& c);
  /// An error on one of this engine's endpoints: fails what depended on it.
  /// False for another endpoint's error.
  bool on_error(const chorus_tp_error_t& e);
  /// Posts what waited for room, and fails operations past their deadline.
  void progress();
  /// Some operation is registered and not complete.
  bool active() const { return live_ > 0; }
  /// Milliseconds until the earliest deadline (capped).
  int next_deadline_ms(int cap) const;
  /// Fails every registered operation with `why` and closes the endpoints
  /// (nothing lands in caller memory afterwards).
  void fail_all(const Status& why);
  /// Closes the endpoints (finalize); registered operations must be gone.
  /// Their entries stay in ep_peer_, marked closed.
  void close();
  /// The peer's connection ended cleanly (it finalized): errors on its
  /// endpoints are expected from then on.
  void peer_finalized(int peer);
  /// Finalize: takes every standing receive of every peer with a goodbye
  /// message, so that closing the endpoints leaves nothing outstanding on
  /// either side (which transports report as a loss).
  void say_bye();
  /// Every peer's goodbyes arrived (or its connection is gone).
  bool byes_done() const;

 private:
  enum Kind : uint16_t { kEager = 1, kRts = 2, kCts = 3, kNack = 4, kBye = 5 };
  struct Header {
    uint16_t magic;
    uint16_t kind;
    int32_t tag;
    int32_t dtype;
    uint32_t spare;
    uint64_t bytes;
    uint64_t seq;
  };
  static_assert(sizeof(Header) == kHeaderBytes);
  /// A message that arrived before a receive matched it.
  struct Unexpected {
    int peer;
    Header h;
    std::vector<std::byte> payload;  // eager only
    uint64_t order = 0;              // arrival number
  };
  /// A post that waits for room in the transport (CHORUS_ERR_AGAIN).
  struct Post {
    int lane;  // 0 control send, 1 bulk send, 2 bulk receive
    std::byte* buf;
    size_t len;
    chorus_tp_mr_t* mr;
    uint64_t wr_id;
  };
  /// A pair's connection: connected at init (kUp from the start), or on
  /// first use: kIdle until an operation or the peer's connect request
  /// needs it, kConnecting while the polled connects run.
  enum class Link : uint8_t { kUp, kIdle, kConnecting };
  struct Peer {
    Link link = Link::kUp;
    std::vector<std::byte> blob[2];  // the peer's addresses, for a deferred connect
    bool ep_up[2] = {false, false};
    std::deque<Post> waiting;                      // in post order
    std::deque<std::shared_ptr<P2pOp>> eager_out;  // control sends carrying an op, in order
    std::deque<int> ctrl_bufs;                     // send buffers of posted control sends
    std::unordered_map<uint64_t, std::shared_ptr<P2pOp>> awaiting_cts;  // by seq
    std::deque<std::shared_ptr<P2pOp>> bulk_out, bulk_in;  // rendezvous data in post order
    uint64_t next_seq = 0;
    bool broken = false;
    bool finalized = false;
    // The connection ended: what was already received is still delivered
    // (in order, before the errors of the receives left standing); once
    // those are all back the pair is broken.
    bool dying = false;
    Status dying_status;
    int slots_out = 0;  // standing receives posted on the control endpoint
    int byes = 0;       // goodbye messages received
    Status broken_status;
  };

  /// Sends a control message; `payload` is caller memory. Returns 0, or
  /// the errno when the payload is not readable (nothing is sent).
  int send_ctrl(int peer, const Header& h, const void* payload, size_t len,
                std::shared_ptr<P2pOp> op);
  void post(int peer, Post p);
  /// Starts the pair's connection if it waits for first use.
  void begin_connect(int peer);
  /// Polls the pair's connects; once both endpoints are up, arms the pair
  /// and posts what waited for it.
  void poll_connect(int peer);
  /// Posts `peer`'s standing receives on its control endpoint.
  void arm_peer(int peer);
  bool try_post(int peer, const Post& p);
  /// Posts the peer's waiting posts, in order, until the transport is full.
  void flush(int peer);
  /// on_completion() for one of `peer`'s endpoints.
  void handle_completion(int peer, const chorus_tp_completion_t& c);
  int send_buffer();  // index into send_bufs_
  void arrived(int peer, const Header& h, const std::byte* payload);
  /// Matches a message with `op` (a receive): copies an eager payload, or
  /// posts the rendezvous data and sends the clear-to-send.
  void deliver(std::shared_ptr<P2pOp> op, int peer, const Header& h, const std::byte* payload);
  /// Why a message cannot go into `op`, or "" when it can.
  std::string refusal(const P2pOp& op, int peer, const Header& h) const;
  void complete(P2pOp& op, Status st);
  /// Whether a posted receive takes a message from `peer` with `tag`.
  static bool accepts(const P2pOp& r, int peer, int tag);
  /// Closes the pair's endpoints and fails everything that depends on it
  /// (a failure seen or decided here).
  void break_peer(int peer, const Status& why);
  /// The pair's connection ended (an error from the transport): sends fail
  /// now, receives once the messages already received are processed.
  void lose(int peer, const Status& why);
  /// Empties the pair's waiting posts and returns its operations with a
  /// message in flight (sends, rendezvous data), which can no longer finish.
  std::vector<std::shared_ptr<P2pOp>> take_in_flight(Peer& pr);
  std::string op_name(const P2pOp& op) const;
  Status register_user(P2pOp& op);

  const chorus_transport_plugin_v1_t* tp_;
  chorus_tp_context_t* ctx_;
  chorus_tp_caps_t caps_;
  const int rank_, size_;
  Hooks hooks_;
  size_t max_msg_;
  std::vector<chorus_tp_endpoint_t*> eps_[2];
  // Every endpoint the engine opened, to its peer; a closed one maps to -1:
  // its late completions and errors are this engine's (dropped), never a
  // collective's. One lookup per completion on every poll path.
  std::unordered_map<const chorus_tp_endpoint_t*, int> ep_peer_;
  std::vector<Peer> peers_;
  // Standing receive slots: [peer][slot], one registered block.
  std::byte* slots_ = nullptr;
  chorus_tp_mr_t* slots_mr_ = nullptr;
  // Control send buffers, grown in registered blocks of kSendBlock.
  static constexpr int kSendBlock = 16;
  std::vector<std::byte*> send_bufs_;
  std::vector<chorus_tp_mr_t*> send_mrs_;  // [buffer / kSendBlock]
  std::vector<std::byte*> send_blocks_;
  std::vector<int> free_bufs_;
  // One registered goodbye header, sent kSlots times to every peer.
  std::byte* bye_ = nullptr;
  chorus_tp_mr_t* bye_mr_ = nullptr;
  // Receives not yet matched, in post order; messages not yet received.
  std::list<std::shared_ptr<P2pOp>> posted_;
  std::list<Unexpected> unexpected_;
  int live_ = 0;        // operations started and not complete
  int connecting_ = 0;  // peers in Link::kConnecting
  static constexpr auto kConnectPollGap = std::chrono::microseconds(200);
  std::chrono::steady_clock::time_point last_connect_poll_{};
  bool closing_ = false;     // finalize began: no new connections
  uint64_t arrivals_ = 0;    // messages arrived so far
  uint64_t delivering_ = 0;  // the arrival number of the message being delivered
  UserMemory mem_;
};

}  // namespace chorus::core
