// The loopback endpoint: connecting by blob, posting, and the one place data
// moves (deliver). Contract rules are cited as in docs/transport-abi.md §1.
#include "loopback.h"

#include <unistd.h>

#include <cstring>

using chorus::loopback::Address;
using chorus::loopback::Error;
using chorus::loopback::fabric_mutex;
using chorus::loopback::kMaxOutstanding;
using chorus::loopback::set_last_error;

std::string chorus_tp_endpoint::describe_peer() const {
  const int data_channels = ctx_.data_channels();
  if (data_channels > 0 && channel_ >= data_channels) {
    return "rank " + std::to_string(peer_rank_) + " (notice channel)";  // C1b
  }
  return "rank " + std::to_string(peer_rank_) + " (channel " + std::to_string(channel_) + ")";
}

// P2: the blob must name this endpoint's peer and channel and come from this
// process. P3: connect never waits for the other side; it links this end to
// the peer's and returns. Sends posted before the peer connects simply wait
// in sends_ (backpressure, S5), because the peer cannot post a receive
// before it has connected.
void chorus_tp_endpoint::connect(const void* address, std::size_t length, int /*timeout_ms*/) {
  Address a{};
  if (length != sizeof a) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT, "a loopback address is " + std::to_string(sizeof a) +
                                                 " bytes, got " + std::to_string(length));
  }
  std::memcpy(&a, address, sizeof a);
  if (std::memcmp(a.magic, "CHLB", 4) != 0) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "the blob for " + describe_peer() + " is not a loopback address");
  }
  if (a.pid != ::getpid()) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "the blob for " + describe_peer() + " comes from process " + std::to_string(a.pid) +
                    "; the loopback transport connects ranks of one process only "
                    "(use tcp or shm between processes)");
  }
  if (a.rank != peer_rank_ || a.peer_rank != ctx_.rank() || a.channel != channel_) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "the blob for " + describe_peer() + " belongs to rank " + std::to_string(a.rank) +
                    "'s endpoint towards rank " + std::to_string(a.peer_rank) + " (channel " +
                    std::to_string(a.channel) + ")");
  }
  std::lock_guard<std::mutex> lock(fabric_mutex());
  if (peer_ != nullptr || lost_) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "the endpoint to " + describe_peer() + " was connected before");
  }
  chorus_tp_endpoint* peer = chorus::loopback::find_endpoint(a.id);
  if (peer == nullptr) {
    // P4: a peer that closed before we connected will never come back.
    throw Error(CHORUS_ERR_PEER_LOST, "the endpoint of " + describe_peer() + " is closed");
  }
  if (peer->back_ != nullptr || (peer->peer_ != nullptr && peer->peer_ != this)) {
    throw Error(CHORUS_ERR_INVALID_ARGUMENT,
                "the endpoint of " + describe_peer() + " is connected to another endpoint");
  }
  peer_ = peer;
  peer->back_ = this;
}

int chorus_tp_endpoint::check_postable(const char* op, std::uint32_t outstanding) const {
  if (lost_) return set_last_error(CHORUS_ERR_PEER_LOST, std::string(op) + ": " + lost_why_);
  if (peer_ == nullptr) {
    return set_last_error(CHORUS_ERR_INVALID_ARGUMENT,
                          std::string(op) + ": the endpoint to " + describe_peer() +
                              " is not connected; call endpoint_connect first");
  }
  if (outstanding >= kMaxOutstanding) {  // S2: nothing changes, the caller reaps and retries
    return set_last_error(CHORUS_ERR_AGAIN, std::string(op) + ": " +
                                                std::to_string(kMaxOutstanding) +
                                                " posts outstanding on the endpoint to " +
                                                describe_peer() + "; poll and retry");
  }
  return CHORUS_OK;
}

// S1: never blocks. S3: the send consumes the peer's oldest receive, or
// queues behind the sends already waiting, so order is post order.
int chorus_tp_endpoint::post_send(const void* buf, std::size_t length, std::uint64_t wr_id) {
  if (buf == nullptr && length > 0) return chorus::provider::null_argument("post_send");
  std::lock_guard<std::mutex> lock(fabric_mutex());
  if (const int rc = check_postable("post_send", sends_out_); rc != CHORUS_OK) return rc;
  ++sends_out_;
  const Post send{const_cast<void*>(buf), length, wr_id};
  if (!peer_->recvs_.empty()) {
    const Post recv = peer_->recvs_.front();
    peer_->recvs_.pop_front();
    deliver(*this, send, *peer_, recv);
  } else {
    sends_.push_back(send);  // S5: no receive yet, the send waits
  }
  return CHORUS_OK;
}

int chorus_tp_endpoint::post_recv(void* buf, std::size_t length, std::uint64_t wr_id) {
  if (buf == nullptr && length > 0) return chorus::provider::null_argument("post_recv");
  std::lock_guard<std::mutex> lock(fabric_mutex());
  if (const int rc = check_postable("post_recv", recvs_out_); rc != CHORUS_OK) return rc;
  ++recvs_out_;
  const Post recv{buf, length, wr_id};
  if (!peer_->sends_.empty()) {
    const Post send = peer_->sends_.front();
    peer_->sends_.pop_front();
    deliver(*peer_, send, *this, recv);
  } else {
    recvs_.push_back(recv);
  }
  return CHORUS_OK;
}

// The data path: one memcpy, then a completion on each side. Both contexts
// may belong to other threads, which is why the queues are pushed under the
// lock and the waiting thread is woken (Q4).
void chorus_tp_endpoint::deliver(chorus_tp_endpoint& from, const Post& send, chorus_tp_endpoint& to,
                                 const Post& recv) {
  if (send.length > recv.length) {
    // S6: the receive fails naming both sizes, the message is dropped and the
    // next message goes to the next receive. The sender cannot tell (as with
    // TCP), so its send completes normally.
    to.ctx_.queue().push_error(
        &to, CHORUS_TP_RECV, recv.wr_id, CHORUS_ERR_INVALID_ARGUMENT, to.peer_rank_,
        "message of " + std::to_string(send.length) + " bytes arrived for a receive of " +
            std::to_string(recv.length) + " bytes from " + to.describe_peer() +
            "; the message was discarded");
  } else {
    if (send.length > 0) std::memcpy(recv.buf, send.buf, send.length);
    to.ctx_.queue().push(&to, CHORUS_TP_RECV, recv.wr_id, send.length);  // S4: the message length
  }
  from.ctx_.queue().push(&from, CHORUS_TP_SEND, send.wr_id, send.length);
  from.ctx_.wake();
  to.ctx_.wake();
}

void chorus_tp_endpoint::reaped(std::uint32_t opcode) {
  if (opcode == CHORUS_TP_SEND) {
    --sends_out_;
  } else {
    --recvs_out_;
  }
}

// F1: everything outstanding fails with PEER_LOST, sends and receives each
// in post order (Q3), and the endpoint refuses new posts from now on.
void chorus_tp_endpoint::fail_all(const std::string& why) {
  lost_ = true;
  lost_why_ = why;
  peer_ = nullptr;
  back_ = nullptr;
  for (const Post& p : sends_) {
    ctx_.queue().push_error(this, CHORUS_TP_SEND, p.wr_id, CHORUS_ERR_PEER_LOST, peer_rank_, why);
  }
  for (const Post& p : recvs_) {
    ctx_.queue().push_error(this, CHORUS_TP_RECV, p.wr_id, CHORUS_ERR_PEER_LOST, peer_rank_, why);
  }
  sends_.clear();
  recvs_.clear();
  ctx_.wake();
}

void chorus_tp_endpoint::unlink() {
  // The peer is whichever endpoint we connected to or that connected to us
  // (before both sides have connected only one of the two is set).
  chorus_tp_endpoint* others[2] = {peer_, back_};
  if (others[1] == others[0]) others[1] = nullptr;
  for (chorus_tp_endpoint* other : others) {
    if (other != nullptr) other->fail_all(other->describe_peer() + " closed its endpoint");
  }
  peer_ = nullptr;
  back_ = nullptr;
}
