// c10d ProcessGroup backed by a Chorus communicator (PyTorch 1.13, CPU
// tensors). Every torch call issues one Chorus non-blocking request and
// returns at once. Collectives run in issue order on the communicator's
// progress thread, which is also the order torch issues them on every rank;
// a per-group completion thread waits for them in that same order, finishes
// each Work (copies into non-contiguous or list outputs) and hands the
// completion of its Future to a small thread pool (see TaskPool). send, recv
// and recvAnysource are Chorus's tagged point-to-point, which completes in
// whatever order the peers allow: each of those is waited for on a pool
// thread instead.
// Bootstrap goes through the torch Store the process group was created with
// (Chorus's host all-gather hook): no coordinator address needed.
#include <chorus/chorus.h>

#include <ATen/MemoryOverlap.h>
#include <ATen/core/ivalue.h>
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <pybind11/chrono.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace chorus_torch {

[[noreturn]] void fail(const std::string& what, int rc) {
  TORCH_CHECK(false, "chorus: ", what, ": ", chorus_status_name(rc), ": ", chorus_last_error());
}

int to_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kBool:
      return CHORUS_BOOL;
    case at::kChar:
      return CHORUS_INT8;
    case at::kShort:
      return CHORUS_INT16;
    case at::kInt:
      return CHORUS_INT32;
    case at::kLong:
      return CHORUS_INT64;
    case at::kByte:
      return CHORUS_UINT8;
    case at::kHalf:
      return CHORUS_FLOAT16;
    case at::kBFloat16:
      return CHORUS_BFLOAT16;
    case at::kFloat:
      return CHORUS_FLOAT32;
    case at::kDouble:
      return CHORUS_FLOAT64;
    case at::kComplexFloat:
      return CHORUS_COMPLEX64;
    default:
      TORCH_CHECK(false, "chorus: unsupported tensor dtype ", t.scalar_type(),
                  " (supported: bool, int8/16/32/64, uint8, float16, bfloat16, float32, "
                  "float64, complex64)");
  }
}

bool is_bitwise(const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::BAND || op.op_ == c10d::ReduceOp::BOR ||
         op.op_ == c10d::ReduceOp::BXOR;
}

/// Chorus op for SUM/PRODUCT/MIN/MAX. The library has no bitwise ops: the
/// callers all-gather (allreduce) or gather (reduce) and fold the blocks in
/// rank order; AVG and
/// PREMUL_SUM are rejected as gloo rejects them.
int to_op(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return CHORUS_SUM;
    case c10d::ReduceOp::PRODUCT:
      return CHORUS_PROD;
    case c10d::ReduceOp::MIN:
      return CHORUS_MIN;
    case c10d::ReduceOp::MAX:
      return CHORUS_MAX;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(false, "chorus: cannot use ReduceOp.AVG (as with gloo); use SUM and divide");
    default:
      TORCH_CHECK(false,
                  "chorus: unsupported reduce op (SUM, PRODUCT, MIN, MAX, BAND, BOR, "
                  "BXOR are supported)");
  }
}

void check_bitwise_dtype(const at::Tensor& t) {
  TORCH_CHECK(!at::isFloatingType(t.scalar_type()) && !at::isComplexType(t.scalar_type()),
              "chorus: bitwise reduce ops need an integer or bool tensor, got ", t.scalar_type());
}

/// result = fold of the `n` blocks of `flat` (rank order) with a bitwise op.
at::Tensor fold_bitwise(const at::Tensor& flat, int n, const c10d::ReduceOp& op) {
  auto blocks = flat.view({n, flat.numel() / n});
  at::Tensor acc = blocks[0].clone();
  for (int r = 1; r < n; ++r) {
    if (op.op_ == c10d::ReduceOp::BAND)
      acc.bitwise_and_(blocks[r]);
    else if (op.op_ == c10d::ReduceOp::BOR)
      acc.bitwise_or_(blocks[r]);
    else
      acc.bitwise_xor_(blocks[r]);
  }
  return acc;
}

void check_cpu(const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu(), "chorus: only CPU tensors are supported, got ", t.device());
}

/// What one torch call hands to the completion thread: the one Chorus request
/// it issued, tensors to keep alive until it finishes, and the steps that run
/// after it succeeded (copies into the caller's tensors).
struct Issue {
  chorus_request_t* req = nullptr;
  std::vector<at::Tensor> keep;
  std::vector<std::function<void()>> post;
  /// A tagged send or receive: completes out of issue order.
  bool tagged = false;
  /// A tagged receive: the element count of its tensor, which the message
  /// must fill (a shorter one is an error: c10d cannot report a count).
  int64_t recv_count = -1;
};

/// Contiguous CPU view of `t`, or a contiguous copy (then a step copies it
/// back into `t` once the requests complete, when `output`).
at::Tensor staged(const at::Tensor& t, Issue& is, bool output) {
  check_cpu(t);
  if (t.is_contiguous()) return t;
  at::Tensor c = t.contiguous();
  if (output) is.post.push_back([t, c]() mutable { t.copy_(c); });
  return c;
}

/// Runs future completions (and with them the callbacks attached through
/// Future::then) off the completion thread, and the waits for tagged
/// point-to-point requests. Both may block for as long as another operation
/// takes (PowerSGD's hook waits inside its callbacks; a receive waits for its
/// sender), so when every pool thread is busy a new one is started instead of
/// queueing behind it: the pool grows to the number of tagged operations in
/// flight plus the nesting depth of blocking callbacks, and its threads are
/// reused after that.
class TaskPool {
 public:
  ~TaskPool() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) {
      if (t.get_id() == std::this_thread::get_id())
        t.detach();  // the last reference was dropped inside a callback
      else
        t.join();
    }
  }

  void post(std::function<void()> fn) {
    std::unique_lock<std::mutex> lock(mu_);
    tasks_.push_back(std::move(fn));
    if (idle_ < tasks_.size())
      threads_.emplace_back([this] { loop(); });
    else
      cv_.notify_one();
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      --idle_;
      if (tasks_.empty()) return;  // stop_ and drained
      auto fn = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool stop_ = false;
};

/// The Work of one torch call. Completed by the group's completion thread:
/// isCompleted/isSuccess/wait report it, and getFuture() completes with the
/// output tensors (a list, or a list of lists for the gather-like ops, as
/// gloo's) or with the error.
class ChorusWork : public c10d::Work {
 public:
  /// `source` of a Work that is not a receive.
  static constexpr int kNotRecv = -2;

  /// `source`: the peer of a receive, CHORUS_ANY_SOURCE for recvAnysource
  /// (the sender is read from the request once it completes), else kNotRecv.
  ChorusWork(c10d::OpType type, const char* name, Issue is, c10::IValue value,
             int source = kNotRecv)
      : c10d::Work(-1, type),
        name_(name),
        is_(std::move(is)),
        value_(std::move(value)),
        source_(source),
        future_(c10::make_intrusive<c10::ivalue::Future>(value_.type())) {}

  ~ChorusWork() override {
    // Normally empty here: the completion thread owns a reference until done.
    if (is_.req) {
      chorus_wait(is_.req, -1);
      chorus_request_free(is_.req);
    }
  }

  bool wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (timeout == kNoTimeout) {
      cv_.wait(lock, [&] { return completed_; });
    } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
      TORCH_CHECK(false, "chorus: ", name_, " not complete after ", timeout.count(),
                  " ms (it keeps running; wait again, or the group's timeout fails it)");
    }
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  int sourceRank() const override {
    const int source = source_.load();
    TORCH_CHECK(source != kNotRecv, "chorus: sourceRank() is only defined for recv");
    TORCH_CHECK(source >= 0,
                "chorus: recv from any source: the sender is known once the receive has "
                "completed successfully; wait() for it first");
    return source;
  }

  std::vector<at::Tensor> result() override {
    if (value_.isTensorList()) return value_.toTensorVector();
    return {};
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  /// Completion thread: waits for the request, runs the post steps, and
  /// returns the error if any (nullptr on success).
  std::exception_ptr run() {
    std::exception_ptr eptr;
    int rc = chorus_wait(is_.req, -1);
    if (rc != CHORUS_OK)
      eptr = std::make_exception_ptr(std::runtime_error(std::string("chorus: ") + name_ + ": " +
                                                        chorus_status_name(rc) + ": " +
                                                        chorus_last_error()));
    else if (is_.recv_count >= 0)
      eptr = received();
    chorus_request_free(is_.req);
    is_.req = nullptr;
    if (!eptr) {
      try {
        for (auto& f : is_.post) f();
      } catch (...) {
        eptr = std::current_exception();
      }
    }
    is_.post.clear();
    is_.keep.clear();
    return eptr;
  }

  /// Pool thread: completes the Work, then its future (whose callbacks run
  /// here), so a completed future implies isCompleted(). (gloo does it the
  /// other way round, which lets isCompleted() lag behind the future.)
  void complete(std::exception_ptr eptr) {
    finish(eptr);
    if (eptr)
      future_->setError(eptr);
    else
      future_->markCompleted(value_);
  }

 private:
  /// A completed tagged receive: records its sender, and refuses a message
  /// shorter than the tensor (its tail would keep stale values unnoticed).
  std::exception_ptr received() {
    chorus_p2p_status_t st{};
    if (int rc = chorus_request_p2p_status(is_.req, &st); rc != CHORUS_OK)
      return std::make_exception_ptr(std::runtime_error(std::string("chorus: ") + name_ + ": " +
                                                        chorus_status_name(rc) + ": " +
                                                        chorus_last_error()));
    source_.store(st.source);
    if (int64_t(st.count) == is_.recv_count) return nullptr;
    return std::make_exception_ptr(std::runtime_error(
        std::string("chorus: ") + name_ + ": size mismatch: rank " + std::to_string(st.source) +
        " sent " + std::to_string(st.count) + " elements with tag " + std::to_string(st.tag) +
        ", the tensor has " + std::to_string(is_.recv_count) +
        " (a recv takes exactly its tensor's size)"));
  }

  const char* name_;
  Issue is_;
  c10::IValue value_;
  // Written by the thread that completes the Work, before it is marked
  // complete; read by the caller after wait().
  std::atomic<int> source_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

c10::IValue tensor_list(const std::vector<at::Tensor>& ts) {
  return c10::IValue(c10::List<at::Tensor>(ts));
}

c10::IValue tensor_lists(const std::vector<std::vector<at::Tensor>>& ts) {
  c10::List<c10::List<at::Tensor>> l;
  for (auto& v : ts) l.push_back(c10::List<at::Tensor>(v));
  return c10::IValue(l);
}

/// The Store-backed all-gather that bootstraps the communicator.
struct StoreBootstrap {
  c10::intrusive_ptr<c10d::Store> store;
  int rank;
  int size;
  int round = 0;
};

int store_allgather(void* ctx, const void* in, void* out, size_t n) {
  auto* b = static_cast<StoreBootstrap*>(ctx);
  try {
    std::string prefix = "chorus/ag/" + std::to_string(b->round++) + "/";
    auto* p = static_cast<const uint8_t*>(in);
    b->store->set(prefix + std::to_string(b->rank), std::vector<uint8_t>(p, p + n));
    for (int r = 0; r < b->size; ++r) {
      auto v = b->store->get(prefix + std::to_string(r));
      if (v.size() != n) return 1;
      std::memcpy(static_cast<uint8_t*>(out) + size_t(r) * n, v.data(), n);
    }
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

/// Whether a tensor list's members all match `ref`'s dtype and element count.
void check_same(const std::vector<at::Tensor>& ts, const at::Tensor& ref, const char* op,
                const char* what) {
  for (size_t i = 0; i < ts.size(); ++i) {
    check_cpu(ts[i]);
    TORCH_CHECK(ts[i].scalar_type() == ref.scalar_type(), "chorus: ", op, ": ", what, "[", i,
                "] has dtype ", ts[i].scalar_type(), ", expected ", ref.scalar_type());
    TORCH_CHECK(ts[i].numel() == ref.numel(), "chorus: ", op, ": ", what, "[", i, "] has ",
                ts[i].numel(), " elements, expected ", ref.numel());
  }
}

void check_root(int64_t root, int size, const char* op) {
  TORCH_CHECK(root >= 0 && root < size, "chorus: ", op, ": invalid root rank ", root,
              " (group size ", size, ")");
}

class ProcessGroupChorus : public c10d::ProcessGroup {
 public:
  ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout)
      : c10d::ProcessGroup(rank, size) {
    StoreBootstrap boot{store, rank, size};
    std::vector<std::string> settings;
    if (timeout.count() > 0) {
      // milliseconds::max() is create()'s "no deadline"; others are exact
      // in %.17g (std::to_string would print 1e-7 s as 0.000000).
      char text[64];
      if (timeout == std::chrono::milliseconds::max())
        std::snprintf(text, sizeof text, "inf");
      else
        std::snprintf(text, sizeof text, "%.17g", double(timeout.count()) / 1000.0);
      settings.push_back(std::string("timeout.collective=") + text);
      settings.push_back(std::string("timeout.init=") + text);
    }
    std::vector<const char*> s;
    for (auto& x : settings) s.push_back(x.c_str());
    chorus_options_t o;
    chorus_options_init(&o);
    o.rank = rank;
    o.size = size;
    o.settings = s.data();
    o.settings_count = s.size();
    o.allgather = &store_allgather;
    o.bootstrap_ctx = &boot;
    if (int rc = chorus_comm_init(&o, &comm_); rc != CHORUS_OK)
      fail("creating the communicator", rc);
    completer_ = std::thread([this] { complete_loop(); });
  }

  ~ProcessGroupChorus() override {
    {
      // Python may drop the last reference with the GIL held while a queued
      // future still has a Python callback to run: let it run.
      std::unique_ptr<pybind11::gil_scoped_release> nogil;
      if (Py_IsInitialized() && PyGILState_Check()) nogil.reset(new pybind11::gil_scoped_release());
      {
        std::unique_lock<std::mutex> lock(queue_mu_);
        stop_ = true;
      }
      queue_cv_.notify_all();
      completer_.join();  // drains the queue first; each request has its deadline
      pool_.reset();      // waits for the tagged requests, runs the future completions
    }
    chorus_comm_finalize(comm_);
  }

  const std::string getBackendName() const override { return "chorus"; }
  chorus_comm_t* comm() const { return comm_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, "chorus: broadcast takes one tensor");
    check_root(opts.rootRank, getSize(), "broadcast");
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    at::Tensor t = staged(tensors[0], is, true);
    is.keep.push_back(t);
    chorus_request_t* r = nullptr;
    if (int rc = chorus_ibroadcast(comm_, t.data_ptr(), size_t(t.numel()), to_dtype(t),
                                   int(opts.rootRank), &r))
      fail("broadcast", rc);
    is.req = r;
    return enqueue(c10d::OpType::BROADCAST, "broadcast", std::move(is), tensor_list(tensors));
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, "chorus: allreduce takes one tensor");
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    at::Tensor t = staged(tensors[0], is, true);
    issue_allreduce(is, t, opts.reduceOp, "allreduce");
    return enqueue(c10d::OpType::ALLREDUCE, "allreduce", std::move(is), tensor_list(tensors));
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    TORCH_CHECK(!tensors.empty(), "chorus: allreduce_coalesced requires non-empty tensor list");
    for (auto& t : tensors) {
      check_cpu(t);
      TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                  "chorus: allreduce_coalesced requires tensors of one dtype, got ",
                  tensors[0].scalar_type(), " and ", t.scalar_type());
    }
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    std::vector<at::Tensor> flat_parts;
    for (auto& t : tensors) flat_parts.push_back(t.reshape({-1}));
    at::Tensor flat = at::cat(flat_parts);
    auto outs = tensors;
    is.post.push_back([flat, outs]() mutable {
      int64_t off = 0;
      for (auto& o : outs) {
        o.copy_(flat.narrow(0, off, o.numel()).view(o.sizes()));
        off += o.numel();
      }
    });
    issue_allreduce(is, flat, opts.reduceOp, "allreduce_coalesced");
    return enqueue(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", std::move(is),
                   tensor_list(tensors));
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, "chorus: reduce takes one tensor");
    check_root(opts.rootRank, getSize(), "reduce");
    const int root = int(opts.rootRank);
    const bool at_root = getRank() == root;
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    // Only the root's tensor is an output; elsewhere it is left as it was.
    at::Tensor t = staged(tensors[0], is, at_root);
    is.keep.push_back(t);
    const size_t count = size_t(t.numel());
    chorus_request_t* r = nullptr;
    int rc = CHORUS_OK;
    if (is_bitwise(opts.reduceOp)) {
      // Chorus has no bitwise ops: gather to the root, which folds in rank order.
      check_bitwise_dtype(t);
      at::Tensor flat;
      if (at_root) {
        flat = at::empty({int64_t(getSize()) * t.numel()}, t.options());
        is.keep.push_back(flat);
        is.post.insert(is.post.begin(), [t, flat, n = getSize(), op = opts.reduceOp]() mutable {
          t.copy_(fold_bitwise(flat, n, op).view(t.sizes()));
        });
      }
      rc = chorus_igather(comm_, t.data_ptr(), at_root ? flat.data_ptr() : nullptr, count,
                          to_dtype(t), root, &r);
    } else {
      rc = chorus_ireduce(comm_, t.data_ptr(), at_root ? t.data_ptr() : nullptr, count, to_dtype(t),
                          to_op(opts.reduceOp), root, &r);
    }
    if (rc != CHORUS_OK) fail("reduce", rc);
    is.req = r;
    return enqueue(c10d::OpType::REDUCE, "reduce", std::move(is), tensor_list(tensors));
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override {
    TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
                "chorus: allgather takes one input tensor and one output list");
    TORCH_CHECK(int(outputs[0].size()) == getSize(), "chorus: allgather: output list has ",
                outputs[0].size(), " tensors, expected world_size ", getSize());
    check_same(outputs[0], inputs[0], "allgather", "output");
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    at::Tensor in = staged(inputs[0], is, false);
    at::Tensor flat = at::empty({int64_t(getSize()) * in.numel()}, in.options());
    auto outs = outputs[0];
    is.post.push_back([flat, outs, n = in.numel()]() mutable {
      for (size_t i = 0; i < outs.size(); ++i)
        outs[i].copy_(flat.narrow(0, int64_t(i) * n, n).view(outs[i].sizes()));
    });
    is.keep = {in, flat};
    chorus_request_t* r = nullptr;
    if (int rc = chorus_iall_gather(comm_, in.data_ptr(), flat.data_ptr(), size_t(in.numel()),
                                    to_dtype(in), &r))
      fail("allgather", rc);
    is.req = r;
    return enqueue(c10d::OpType::ALLGATHER, "allgather", std::move(is), tensor_lists(outputs));
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    check_cpu(output);
    check_cpu(input);
    TORCH_CHECK(output.scalar_type() == input.scalar_type(),
                "chorus: _allgather_base: output dtype ", output.scalar_type(),
                " differs from input dtype ", input.scalar_type());
    TORCH_CHECK(output.numel() == input.numel() * getSize(), "chorus: _allgather_base: output has ",
                output.numel(),
                " elements, expected world_size * input = ", input.numel() * getSize());
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    at::Tensor in = staged(input, is, false);
    at::Tensor out = staged(output, is, true);
    is.keep = {in, out};
    chorus_request_t* r = nullptr;
    if (int rc = chorus_iall_gather(comm_, in.data_ptr(), out.data_ptr(), size_t(in.numel()),
                                    to_dtype(in), &r))
      fail("_allgather_base", rc);
    is.req = r;
    return enqueue(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", std::move(is),
                   tensor_list({output}));
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions&) override {
    TORCH_CHECK(int(outputs.size()) == getSize(), "chorus: allgather_coalesced: ", outputs.size(),
                " output lists, expected world_size ", getSize());
    for (auto& list : outputs) {
      TORCH_CHECK(list.size() == inputs.size(), "chorus: allgather_coalesced: an output list has ",
                  list.size(), " tensors, expected one per input (", inputs.size(), ")");
      for (size_t i = 0; i < inputs.size(); ++i)
        check_same({list[i]}, inputs[i], "allgather_coalesced", "output");
    }
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    // Inputs of any dtypes travel as one byte buffer.
    std::vector<at::Tensor> bytes;
    for (auto& t : inputs) {
      check_cpu(t);
      bytes.push_back(t.contiguous().reshape({-1}).view(at::kByte));
    }
    at::Tensor in = bytes.empty() ? at::empty({0}, at::kByte) : at::cat(bytes);
    at::Tensor flat = at::empty({int64_t(getSize()) * in.numel()}, in.options());
    auto outs = outputs;
    is.post.push_back([flat, outs, n = in.numel()]() mutable {
      for (size_t r = 0; r < outs.size(); ++r) {
        int64_t off = int64_t(r) * n;
        for (auto& o : outs[r]) {
          int64_t nb = o.numel() * int64_t(o.element_size());
          o.copy_(flat.narrow(0, off, nb).view(o.scalar_type()).view(o.sizes()));
          off += nb;
        }
      }
    });
    is.keep = {in, flat};
    chorus_request_t* r = nullptr;
    if (int rc = chorus_iall_gather(comm_, in.data_ptr(), flat.data_ptr(), size_t(in.numel()),
                                    CHORUS_UINT8, &r))
      fail("allgather_coalesced", rc);
    is.req = r;
    return enqueue(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", std::move(is),
                   tensor_lists(outputs));
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    check_root(opts.rootRank, getSize(), "gather");
    TORCH_CHECK(inputs.size() == 1, "chorus: gather takes one input tensor");
    check_cpu(inputs[0]);
    if (getRank() == opts.rootRank) {
      TORCH_CHECK(outputs.size() == 1, "chorus: gather: the root needs one output list");
      TORCH_CHECK(int(outputs[0].size()) == getSize(), "chorus: gather: output list has ",
                  outputs[0].size(), " tensors, expected world_size ", getSize());
      check_same(outputs[0], inputs[0], "gather", "output");
    } else {
      TORCH_CHECK(outputs.empty(), "chorus: gather: only the root (rank ", opts.rootRank,
                  ") takes output tensors");
    }
    const int root = int(opts.rootRank);
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    at::Tensor in = staged(inputs[0], is, false);
    is.keep.push_back(in);
    // The root receives into one flat buffer and copies each block out.
    at::Tensor flat;
    if (getRank() == root) {
      flat = at::empty({int64_t(getSize()) * in.numel()}, in.options());
      is.keep.push_back(flat);
      is.post.push_back([flat, outs = outputs[0], n = in.numel()]() mutable {
        for (size_t i = 0; i < outs.size(); ++i)
          outs[i].copy_(flat.narrow(0, int64_t(i) * n, n).view(outs[i].sizes()));
      });
    }
    chorus_request_t* r = nullptr;
    if (int rc = chorus_igather(comm_, in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr,
                                size_t(in.numel()), to_dtype(in), root, &r))
      fail("gather", rc);
    is.req = r;
    return enqueue(c10d::OpType::GATHER, "gather", std::move(is), tensor_lists(outputs));
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    check_root(opts.rootRank, getSize(), "scatter");
    TORCH_CHECK(outputs.size() == 1, "chorus: scatter takes one output tensor");
    check_cpu(outputs[0]);
    if (getRank() == opts.rootRank) {
      TORCH_CHECK(inputs.size() == 1, "chorus: scatter: the root needs one input list");
      TORCH_CHECK(int(inputs[0].size()) == getSize(), "chorus: scatter: input list has ",
                  inputs[0].size(), " tensors, expected world_size ", getSize());
      check_same(inputs[0], outputs[0], "scatter", "input");
    } else {
      TORCH_CHECK(inputs.empty(), "chorus: scatter: only the root (rank ", opts.rootRank,
                  ") takes input tensors");
    }
    const int root = int(opts.rootRank);
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    at::Tensor out = staged(outputs[0], is, true);
    is.keep.push_back(out);
    // The root sends from one flat copy of its input list.
    at::Tensor flat;
    if (getRank() == root) {
      flat = flatten(inputs[0], out);
      is.keep.push_back(flat);
    }
    chorus_request_t* r = nullptr;
    if (int rc = chorus_iscatter(comm_, flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(),
                                 size_t(out.numel()), to_dtype(out), root, &r))
      fail("scatter", rc);
    is.req = r;
    return enqueue(c10d::OpType::SCATTER, "scatter", std::move(is), tensor_list(outputs));
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
                "chorus: reduce_scatter takes one output tensor and one input list");
    TORCH_CHECK(int(inputs[0].size()) == getSize(), "chorus: reduce_scatter: input list has ",
                inputs[0].size(), " tensors, expected world_size ", getSize());
    check_cpu(outputs[0]);
    check_same(inputs[0], outputs[0], "reduce_scatter", "input");
    int op = to_op(opts.reduceOp);
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    at::Tensor out = staged(outputs[0], is, true);
    std::vector<at::Tensor> flat_parts;
    for (auto& t : inputs[0]) flat_parts.push_back(t.reshape({-1}));
    at::Tensor in = at::cat(flat_parts);
    is.keep = {in, out};
    chorus_request_t* r = nullptr;
    if (int rc = chorus_ireduce_scatter(comm_, in.data_ptr(), out.data_ptr(), size_t(out.numel()),
                                        to_dtype(out), op, &r))
      fail("reduce_scatter", rc);
    is.req = r;
    return enqueue(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", std::move(is),
                   tensor_list(outputs));
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    check_cpu(output);
    check_cpu(input);
    TORCH_CHECK(output.scalar_type() == input.scalar_type(),
                "chorus: _reduce_scatter_base: output dtype ", output.scalar_type(),
                " differs from input dtype ", input.scalar_type());
    TORCH_CHECK(input.numel() == output.numel() * getSize(),
                "chorus: _reduce_scatter_base: input has ", input.numel(),
                " elements, expected world_size * output = ", output.numel() * getSize());
    int op = to_op(opts.reduceOp);
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    at::Tensor in = staged(input, is, false);
    at::Tensor out = staged(output, is, true);
    is.keep = {in, out};
    chorus_request_t* r = nullptr;
    if (int rc = chorus_ireduce_scatter(comm_, in.data_ptr(), out.data_ptr(), size_t(out.numel()),
                                        to_dtype(out), op, &r))
      fail("_reduce_scatter_base", rc);
    is.req = r;
    return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", std::move(is),
                   tensor_list({output}));
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions&) override {
    check_cpu(output);
    check_cpu(input);
    TORCH_CHECK(output.scalar_type() == input.scalar_type(), "chorus: alltoall_base: output dtype ",
                output.scalar_type(), " differs from input dtype ", input.scalar_type());
    auto in_counts = split_counts(input, input_splits, "input");
    auto out_counts = split_counts(output, output_splits, "output");
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    at::Tensor in = staged(input, is, false);
    at::Tensor out = staged(output, is, true);
    // all_to_allv has no in-place form: a caller passing one tensor twice
    // gets its input copied first.
    if (at::get_overlap_status(in, out) != at::MemOverlapStatus::No) in = in.clone();
    issue_alltoall(is, in, in_counts, out, out_counts, "alltoall_base");
    return enqueue(c10d::OpType::ALLTOALL_BASE, "alltoall_base", std::move(is),
                   tensor_list({output}));
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions&) override {
    TORCH_CHECK(int(outputs.size()) == getSize() && int(inputs.size()) == getSize(),
                "chorus: alltoall: needs world_size (", getSize(),
                ") input and output tensors, got ", inputs.size(), " and ", outputs.size());
    for (int p = 0; p < getSize(); ++p) {
      check_cpu(inputs[p]);
      check_cpu(outputs[p]);
      TORCH_CHECK(inputs[p].scalar_type() == inputs[0].scalar_type() &&
                      outputs[p].scalar_type() == inputs[0].scalar_type(),
                  "chorus: alltoall: every input and output tensor needs the same dtype");
    }
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    // The library takes one send and one receive buffer: the inputs travel
    // as one flat copy, the outputs are copied out of one flat buffer.
    std::vector<int64_t> in_counts, out_counts;
    int64_t out_total = 0;
    for (int p = 0; p < getSize(); ++p) {
      in_counts.push_back(inputs[p].numel());
      out_counts.push_back(outputs[p].numel());
      out_total += outputs[p].numel();
    }
    at::Tensor in = flatten(inputs, inputs[0]);
    at::Tensor out = at::empty({out_total}, inputs[0].options());
    is.post.push_back([out, outs = outputs]() mutable {
      int64_t off = 0;
      for (auto& o : outs) {
        o.copy_(out.narrow(0, off, o.numel()).view(o.sizes()));
        off += o.numel();
      }
    });
    issue_alltoall(is, in, in_counts, out, out_counts, "alltoall");
    return enqueue(c10d::OpType::ALLTOALL, "alltoall", std::move(is), tensor_list(outputs));
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    chorus_request_t* r = nullptr;
    if (int rc = chorus_ibarrier(comm_, &r)) fail("barrier", rc);
    is.req = r;
    return enqueue(c10d::OpType::BARRIER, "barrier", std::move(is),
                   tensor_list(std::vector<at::Tensor>{}));
  }

  // Point-to-point uses the library's tagged calls with the c10d tag: sends
  // and receives match on (source, tag) like MPI's, in any posting order on
  // either side, and progress alongside the collectives.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "chorus: send takes one tensor");
    check_tag(tag, "send");
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    at::Tensor t = staged(tensors[0], is, false);
    is.keep.push_back(t);
    is.tagged = true;
    chorus_request_t* r = nullptr;
    if (int rc =
            chorus_isend_tagged(comm_, t.data_ptr(), size_t(t.numel()), to_dtype(t), dst, tag, &r))
      fail("send", rc);
    is.req = r;
    return enqueue(c10d::OpType::SEND, "send", std::move(is), tensor_list(tensors));
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "chorus: recv takes one tensor");
    TORCH_CHECK(src >= 0, "chorus: recv: invalid source rank ", src,
                " (recv without a source is recvAnysource)");
    return issue_recv(tensors, src, tag, c10d::OpType::RECV, "recv");
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "chorus: recvAnysource takes one tensor");
    return issue_recv(tensors, CHORUS_ANY_SOURCE, tag, c10d::OpType::RECVANYSOURCE,
                      "recvAnysource");
  }

 private:
  /// c10d tags are ints; the library takes 0..CHORUS_TAG_MAX (INT_MAX).
  static void check_tag(int tag, const char* op) {
    TORCH_CHECK(tag >= 0, "chorus: ", op, ": tag ", tag, " is negative; tags are 0..",
                CHORUS_TAG_MAX);
  }

  /// A tagged receive from `src` (a rank or CHORUS_ANY_SOURCE).
  c10::intrusive_ptr<c10d::Work> issue_recv(std::vector<at::Tensor>& tensors, int src, int tag,
                                            c10d::OpType type, const char* name) {
    check_tag(tag, name);
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    at::Tensor t = staged(tensors[0], is, true);
    is.keep.push_back(t);
    is.tagged = true;
    is.recv_count = t.numel();
    chorus_request_t* r = nullptr;
    if (int rc =
            chorus_irecv_tagged(comm_, t.data_ptr(), size_t(t.numel()), to_dtype(t), src, tag, &r))
      fail(name, rc);
    is.req = r;
    return enqueue(type, name, std::move(is), tensor_list(tensors), src);
  }

  /// Per-peer element counts of an alltoall_base tensor: equal blocks of dim 0
  /// without split sizes, else split sizes (rows of dim 0) times the row size.
  std::vector<int64_t> split_counts(const at::Tensor& t, const std::vector<int64_t>& splits,
                                    const char* what) const {
    int n = getSize();
    int64_t rows = t.dim() == 0 ? 1 : t.size(0);
    int64_t row = rows == 0 ? 0 : t.numel() / rows;
    std::vector<int64_t> counts(size_t(n), 0);
    if (splits.empty()) {
      TORCH_CHECK(rows % n == 0, "chorus: alltoall_base: ", what, " dim 0 (", rows,
                  ") does not divide equally across the group size ", n);
      for (auto& c : counts) c = rows / n * row;
      return counts;
    }
    TORCH_CHECK(int(splits.size()) == n, "chorus: alltoall_base: ", what, " split sizes have ",
                splits.size(), " entries, expected the group size ", n);
    int64_t sum = 0;
    for (int p = 0; p < n; ++p) {
      TORCH_CHECK(splits[p] >= 0, "chorus: alltoall_base: negative ", what, " split size");
      sum += splits[p];
      counts[size_t(p)] = splits[p] * row;
    }
    TORCH_CHECK(sum == rows, "chorus: alltoall_base: ", what, " split sizes sum to ", sum,
                ", but dim 0 is ", rows);
    return counts;
  }

  /// all_reduce of the contiguous `t` in place (the bitwise ops as an
  /// all-gather and a fold in rank order, since Chorus has no bitwise ops).
  void issue_allreduce(Issue& is, const at::Tensor& t, const c10d::ReduceOp& reduce_op,
                       const char* name) {
    chorus_request_t* r = nullptr;
    if (is_bitwise(reduce_op)) {
      check_bitwise_dtype(t);
      at::Tensor flat = at::empty({int64_t(getSize()) * t.numel()}, t.options());
      is.keep.insert(is.keep.end(), {t, flat});
      is.post.insert(is.post.begin(), [t, flat, n = getSize(), reduce_op]() mutable {
        t.copy_(fold_bitwise(flat, n, reduce_op).view(t.sizes()));
      });
      if (int rc = chorus_iall_gather(comm_, t.data_ptr(), flat.data_ptr(), size_t(t.numel()),
                                      to_dtype(t), &r))
        fail(name, rc);
    } else {
      int op = to_op(reduce_op);
      is.keep.push_back(t);
      if (int rc = chorus_iall_reduce(comm_, t.data_ptr(), t.data_ptr(), size_t(t.numel()),
                                      to_dtype(t), op, &r))
        fail(name, rc);
    }
    is.req = r;
  }

  /// One contiguous 1-D copy of `ts` (same dtype as `like`), in list order.
  static at::Tensor flatten(const std::vector<at::Tensor>& ts, const at::Tensor& like) {
    if (ts.empty()) return at::empty({0}, like.options());
    std::vector<at::Tensor> parts;
    for (auto& t : ts) parts.push_back(t.reshape({-1}));
    return at::cat(parts);
  }

  /// all_to_all of the contiguous `in` into the contiguous `out` (disjoint),
  /// with per-peer element counts laid out back to back in rank order: the
  /// library's all_to_all when every count is the same, else all_to_allv.
  void issue_alltoall(Issue& is, const at::Tensor& in, const std::vector<int64_t>& in_counts,
                      const at::Tensor& out, const std::vector<int64_t>& out_counts,
                      const char* name) {
    const int n = getSize();
    is.keep.insert(is.keep.end(), {in, out});
    chorus_request_t* r = nullptr;
    int rc = CHORUS_OK;
    const bool equal = std::all_of(in_counts.begin(), in_counts.end(),
                                   [&](int64_t c) { return c == in_counts[0]; }) &&
                       std::all_of(out_counts.begin(), out_counts.end(),
                                   [&](int64_t c) { return c == in_counts[0]; });
    if (equal) {
      rc = chorus_iall_to_all(comm_, in.data_ptr(), out.data_ptr(), size_t(in_counts[0]),
                              to_dtype(in), &r);
    } else {
      const size_t np = size_t(n);
      std::vector<size_t> sc(np), so(np), rcnt(np), ro(np);
      size_t s_off = 0, r_off = 0;
      for (size_t p = 0; p < np; ++p) {
        sc[p] = size_t(in_counts[p]);
        so[p] = s_off;
        s_off += sc[p];
        rcnt[p] = size_t(out_counts[p]);
        ro[p] = r_off;
        r_off += rcnt[p];
      }
      rc = chorus_iall_to_allv(comm_, in.data_ptr(), sc.data(), so.data(), out.data_ptr(),
                               rcnt.data(), ro.data(), to_dtype(in), &r);
    }
    if (rc != CHORUS_OK) fail(name, rc);
    is.req = r;
  }

  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* name, Issue is,
                                         c10::IValue value, int source = ChorusWork::kNotRecv) {
    const bool tagged = is.tagged;
    auto w = c10::make_intrusive<ChorusWork>(type, name, std::move(is), std::move(value), source);
    if (tagged) {
      // A tagged request may complete long after later ones (a receive
      // whose sender first waits for this rank's next send): waiting for
      // it in the completion thread would hold those back, and can
      // deadlock ranks that wait for each other's later operations.
      pool_->post([w] { w->complete(w->run()); });
      return w;
    }
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      queue_.push_back(w);
    }
    queue_cv_.notify_one();
    return w;
  }

  /// The completion thread: collectives finish in issue order, so waiting
  /// for them in that order costs nothing.
  void complete_loop() {
    for (;;) {
      c10::intrusive_ptr<ChorusWork> w;
      {
        std::unique_lock<std::mutex> lock(queue_mu_);
        queue_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        w = std::move(queue_.front());
        queue_.pop_front();
      }
      std::exception_ptr eptr = w->run();
      pool_->post([w, eptr] { w->complete(eptr); });
    }
  }

  chorus_comm_t* comm_ = nullptr;
  std::mutex issue_mu_;  // one torch call's requests are issued together
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<c10::intrusive_ptr<ChorusWork>> queue_;
  bool stop_ = false;
  std::unique_ptr<TaskPool> pool_ = std::make_unique<TaskPool>();
  std::thread completer_;
};

c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store,
                                              int rank, int size,
                                              const std::chrono::duration<float>& timeout) {
  // Saturating: a timeout too large for milliseconds (timedelta.max, inf)
  // means no deadline, a positive one below 1 ms waits 1 ms; casting the
  // float straight to milliseconds would be undefined behaviour for those.
  const double seconds = std::chrono::duration<double>(timeout).count();
  TORCH_CHECK(!std::isnan(seconds), "chorus: the process group timeout is NaN");
  std::chrono::milliseconds ms(0);
  if (seconds >= 9e15)
    ms = std::chrono::milliseconds::max();
  else if (seconds > 0)
    ms = std::chrono::milliseconds(std::max<int64_t>(1, int64_t(std::ceil(seconds * 1000.0))));
  return c10::make_intrusive<ProcessGroupChorus>(store, rank, size, ms);
}

pybind11::dict counters(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto* p = dynamic_cast<ProcessGroupChorus*>(pg.get());
  TORCH_CHECK(p, "chorus: not a chorus process group");
  size_t n = 0;
  if (int rc = chorus_comm_counters(p->comm(), nullptr, 0, &n)) fail("counters", rc);
  std::vector<chorus_counter_t> c(n);
  if (int rc = chorus_comm_counters(p->comm(), c.data(), c.size(), &n)) fail("counters", rc);
  pybind11::dict d;
  for (size_t i = 0; i < n && i < c.size(); ++i) d[pybind11::str(c[i].name)] = c[i].value;
  return d;
}

}  // namespace chorus_torch

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("create_process_group", &chorus_torch::create, pybind11::arg("store"),
        pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"),
        pybind11::call_guard<pybind11::gil_scoped_release>(),
        "Create a Chorus-backed c10d ProcessGroup (bootstraps through `store`).");
  m.def("counters", &chorus_torch::counters, "Counters of a chorus process group as a dict.");
}
