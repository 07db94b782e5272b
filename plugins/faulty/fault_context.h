// The faulty plugin's context and endpoint objects (the ABI's opaque
// chorus_tp_context and chorus_tp_endpoint): the queue of completions served
// to the caller, where faults are applied, the work requests the inner
// transport still owns, the held (delayed) sends, and dropping a connection.
// The ABI entry points that use them are in faulty.cc; the bodies of the
// context's methods in fault_context.cc. One thread at a time per context.
#pragma once

#include <chorus/transport.h>

#include "fault_config.h"
#include "inner_transport.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace chorus::faulty {

using Clock = std::chrono::steady_clock;

/// A send held back by delay_us.
struct HeldSend {
  Clock::time_point due;
  const void* buf;
  size_t length;
  chorus_tp_mr_t* mr;
  uint64_t wr_id;
  bool with_imm;  // posted with post_send_imm: forwarded the same way
  uint32_t imm;
};

}  // namespace chorus::faulty

struct chorus_tp_endpoint {
  chorus_tp_context* ctx = nullptr;
  chorus_tp_endpoint_t* inner = nullptr;  ///< NULL once dropped
  int peer = -1;
  int channel = 0;
  /// Sends accepted so far, for drop_after.
  uint64_t sends = 0;
  bool dropped = false;
  std::string drop_reason;
  /// wr_ids the inner transport owns, in post order, per direction.
  std::deque<uint64_t> inner_sends, inner_recvs;
  /// Sends held by delay_us, due times non-decreasing.
  std::deque<chorus::faulty::HeldSend> held;
  /// The inner transport said AGAIN for the first held send.
  bool held_blocked = false;
  /// Posted and not yet reaped by the caller.
  uint32_t out_sends = 0, out_recvs = 0;
};

struct chorus_tp_context {
  /// A completion ready for the caller.
  struct Entry {
    chorus_tp_endpoint* ep = nullptr;
    bool failed = false;
    chorus_tp_completion_t ok{};
    chorus_tp_error_t err{};
  };

  const chorus::faulty::InnerTransport* inner = nullptr;
  chorus_tp_context_t* ictx = nullptr;
  chorus::faulty::FaultConfig cfg;
  int rank = 0;
  int data_channels = 0;  // from context_open; 0: unknown
  chorus_tp_caps_t caps{};
  std::deque<Entry> queue;
  std::vector<std::unique_ptr<chorus_tp_endpoint>> endpoints;
  std::unordered_map<chorus_tp_endpoint_t*, chorus_tp_endpoint*> by_inner;
  size_t held = 0;  ///< held sends over all endpoints
  uint64_t completions = 0;
  bool injected = false;
  std::mt19937_64 rng;

  const chorus_transport_plugin_v1_t& ops() const { return *inner->ops; }

  /// Posts a send to the inner transport the way the caller posted it.
  int post_inner(chorus_tp_endpoint_t* iep, const void* buf, size_t length, chorus_tp_mr_t* mr,
                 uint64_t wr_id, bool with_imm, uint32_t imm) const;

  /// Records a failure of the inner transport's `op` as this thread's error.
  int forward_error(int rc, const char* op) const;

  void push_ok(chorus_tp_endpoint* ep, const chorus_tp_completion_t& c);

  void push_error(chorus_tp_endpoint* ep, uint32_t opcode, uint64_t wr_id, int status,
                  const std::string& message);

  /// The inner transport no longer owns the oldest post of `opcode` on `ep`.
  static void retire(chorus_tp_endpoint* ep, uint32_t opcode);

  /// The caller has reaped `e`: its post no longer counts as outstanding.
  static void reap(const Entry& e);

  void accept(const chorus_tp_completion_t& c);

  void accept_error(const chorus_tp_error_t& err);

  /// Moves everything the inner transport has finished into the queue.
  int pump_inner();

  /// Posts the held sends that are due.
  void flush_due(chorus::faulty::Clock::time_point now);

  /// When the next held send is due, unless it waits for the inner queue.
  std::optional<chorus::faulty::Clock::time_point> next_due() const;

  chorus::faulty::Clock::time_point due_time(const chorus_tp_endpoint* ep);

  /// drop_after: closes `ep`'s inner connection; `trigger` is the send that
  /// crossed the limit. Everything outstanding fails, in post order.
  void drop(chorus_tp_endpoint* ep, uint64_t trigger);
};
