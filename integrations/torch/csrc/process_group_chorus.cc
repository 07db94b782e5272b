// c10d ProcessGroup backed by a Chorus communicator (PyTorch 1.13, CPU
// tensors). Every torch call issues one or more Chorus non-blocking requests
// and returns at once; the requests run in issue order on the communicator's
// progress thread, which is also the order torch issues them on every rank.
// A per-group completion thread waits for the requests in that same order,
// finishes each Work (copies into non-contiguous or list outputs) and hands
// the completion of its Future to a small callback pool (see CallbackPool).
// Bootstrap goes through the torch Store the process group was created with
// (Chorus's host all-gather hook): no coordinator address needed.
#include <chorus/chorus.h>

#include <ATen/core/ivalue.h>
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <pybind11/chrono.h>

#include <algorithm>
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

/// Chorus op for SUM/PRODUCT/MIN/MAX. The bitwise ops are composed by the
/// callers (all-gather, then a local fold in rank order); AVG and
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
  auto blocks = flat.view({n, -1});
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

/// What one torch call hands to the completion thread: the Chorus requests it
/// issued (in order), tensors to keep alive until they finish, and the steps
/// that run after the last one succeeded (copies into the caller's tensors).
struct Issue {
  std::vector<chorus_request_t*> reqs;
  std::vector<at::Tensor> keep;
  std::vector<std::function<void()>> post;
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
/// Future::then) off the completion thread. A callback may block on a later
/// operation's future (PowerSGD's hook waits inside its callbacks), so when
/// every pool thread is busy a new one is started instead of queueing behind
/// it: the pool grows to the nesting depth of blocking callbacks, usually 1.
class CallbackPool {
 public:
  ~CallbackPool() {
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
  ChorusWork(c10d::OpType type, const char* name, Issue is, c10::IValue value, int source = -1)
      : c10d::Work(-1, type),
        name_(name),
        is_(std::move(is)),
        value_(std::move(value)),
        source_(source),
        future_(c10::make_intrusive<c10::ivalue::Future>(value_.type())) {}

  ~ChorusWork() override {
    // Normally empty here: the completion thread owns a reference until done.
    for (auto* r : is_.reqs) {
      chorus_wait(r, -1);
      chorus_request_free(r);
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
    TORCH_CHECK(source_ >= 0, "chorus: sourceRank() is only defined for recv");
    return source_;
  }

  std::vector<at::Tensor> result() override {
    if (value_.isTensorList()) return value_.toTensorVector();
    return {};
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  /// Completion thread: waits for every request in order, runs the post
  /// steps, and returns the error if any (nullptr on success).
  std::exception_ptr run() {
    std::exception_ptr eptr;
    for (auto* r : is_.reqs) {
      int rc = chorus_wait(r, -1);
      if (rc != CHORUS_OK && !eptr)
        eptr = std::make_exception_ptr(std::runtime_error(std::string("chorus: ") + name_ + ": " +
                                                          chorus_status_name(rc) + ": " +
                                                          chorus_last_error()));
      chorus_request_free(r);
    }
    is_.reqs.clear();
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
  const char* name_;
  Issue is_;
  c10::IValue value_;
  int source_;
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
      pool_.reset();      // runs the remaining future completions
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
    is.reqs.push_back(r);
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
    check_cpu(tensors[0]);
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    compose_reduce(is, tensors[0], opts.reduceOp, int(opts.rootRank));
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
    is.reqs.push_back(r);
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
    is.reqs.push_back(r);
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
    is.reqs.push_back(r);
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
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    compose_gather(is, inputs[0], outputs.empty() ? std::vector<at::Tensor>{} : outputs[0]);
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
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    compose_scatter(is, outputs[0], inputs.empty() ? std::vector<at::Tensor>{} : inputs[0],
                    int(opts.rootRank));
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
    is.reqs.push_back(r);
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
    is.reqs.push_back(r);
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
    is.keep = {in, out};
    std::vector<Block> send, recv;
    size_t esz = size_t(in.element_size());
    int64_t so = 0, ro = 0;
    for (int p = 0; p < getSize(); ++p) {
      send.push_back({static_cast<char*>(in.data_ptr()) + size_t(so) * esz, size_t(in_counts[p])});
      recv.push_back(
          {static_cast<char*>(out.data_ptr()) + size_t(ro) * esz, size_t(out_counts[p])});
      so += in_counts[p];
      ro += out_counts[p];
    }
    compose_alltoall(is, send, recv, to_dtype(in), esz);
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
    std::vector<Block> send, recv;
    size_t esz = size_t(inputs[0].element_size());
    for (int p = 0; p < getSize(); ++p) {
      at::Tensor in = staged(inputs[p], is, false);
      at::Tensor out = staged(outputs[p], is, true);
      is.keep.push_back(in);
      is.keep.push_back(out);
      send.push_back({in.data_ptr(), size_t(in.numel())});
      recv.push_back({out.data_ptr(), size_t(out.numel())});
    }
    compose_alltoall(is, send, recv, to_dtype(inputs[0]), esz);
    return enqueue(c10d::OpType::ALLTOALL, "alltoall", std::move(is), tensor_list(outputs));
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    chorus_request_t* r = nullptr;
    if (int rc = chorus_ibarrier(comm_, &r)) fail("barrier", rc);
    is.reqs.push_back(r);
    return enqueue(c10d::OpType::BARRIER, "barrier", std::move(is),
                   tensor_list(std::vector<at::Tensor>{}));
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "chorus: send takes one tensor");
    check_tag(tag);
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    at::Tensor t = staged(tensors[0], is, false);
    is.keep.push_back(t);
    chorus_request_t* r = nullptr;
    if (int rc = chorus_isend(comm_, t.data_ptr(), size_t(t.numel()), to_dtype(t), dst, &r))
      fail("send", rc);
    is.reqs.push_back(r);
    return enqueue(c10d::OpType::SEND, "send", std::move(is), tensor_list(tensors));
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "chorus: recv takes one tensor");
    check_tag(tag);
    std::lock_guard<std::mutex> order(issue_mu_);
    Issue is;
    at::Tensor t = staged(tensors[0], is, true);
    is.keep.push_back(t);
    chorus_request_t* r = nullptr;
    if (int rc = chorus_irecv(comm_, t.data_ptr(), size_t(t.numel()), to_dtype(t), src, &r))
      fail("recv", rc);
    is.reqs.push_back(r);
    return enqueue(c10d::OpType::RECV, "recv", std::move(is), tensor_list(tensors), src);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>&, int) override {
    TORCH_CHECK(false,
                "chorus: recv from any source needs the library's any-source point-to-point, "
                "which Chorus does not have yet; pass src= (messages from one rank match in "
                "issue order)");
  }

 private:
  struct Block {
    void* ptr;
    size_t count;
  };

  static void check_tag(int tag) {
    TORCH_CHECK(tag == 0, "chorus: send/recv with tag ", tag,
                " needs the library's tagged point-to-point, which Chorus does not have yet; "
                "use tag 0 (messages between two ranks match in issue order)");
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
    is.reqs.push_back(r);
  }

  /// reduce to `root`: composed until the library's own reduce is used (an
  /// all_reduce into a temporary; only the root copies the result out).
  void compose_reduce(Issue& is, const at::Tensor& t, const c10d::ReduceOp& op, int root) {
    at::Tensor tmp = t.contiguous().clone();
    issue_allreduce(is, tmp, op, "reduce");
    if (getRank() == root) is.post.push_back([t, tmp]() mutable { t.copy_(tmp.view(t.sizes())); });
  }

  /// gather to the root: composed until the library's own gather is used (an
  /// all_gather into a temporary; only the root, whose `outs` is not empty,
  /// copies the blocks out).
  void compose_gather(Issue& is, const at::Tensor& input, std::vector<at::Tensor> outs) {
    at::Tensor in = input.contiguous();
    at::Tensor flat = at::empty({int64_t(getSize()) * in.numel()}, in.options());
    is.keep.insert(is.keep.end(), {in, flat});
    if (!outs.empty())
      is.post.push_back([flat, outs, n = in.numel()]() mutable {
        for (size_t i = 0; i < outs.size(); ++i)
          outs[i].copy_(flat.narrow(0, int64_t(i) * n, n).view(outs[i].sizes()));
      });
    chorus_request_t* r = nullptr;
    if (int rc = chorus_iall_gather(comm_, in.data_ptr(), flat.data_ptr(), size_t(in.numel()),
                                    to_dtype(in), &r))
      fail("gather", rc);
    is.reqs.push_back(r);
  }

  /// scatter from the root: composed until the library's own scatter is used
  /// (the root sends block r to rank r in rank order, every other rank
  /// receives one message; no cycle, so the in-order execution cannot block).
  void compose_scatter(Issue& is, const at::Tensor& output, const std::vector<at::Tensor>& ins,
                       int root) {
    at::Tensor out = staged(output, is, true);
    is.keep.push_back(out);
    if (getRank() != root) {
      chorus_request_t* r = nullptr;
      if (int rc =
              chorus_irecv(comm_, out.data_ptr(), size_t(out.numel()), to_dtype(out), root, &r))
        fail("scatter", rc);
      is.reqs.push_back(r);
      return;
    }
    for (int p = 0; p < getSize(); ++p) {
      at::Tensor in = ins[size_t(p)].contiguous();
      is.keep.push_back(in);
      if (p == root) {
        is.post.insert(is.post.begin(), [out, in]() mutable { out.copy_(in.view(out.sizes())); });
        continue;
      }
      chorus_request_t* r = nullptr;
      int rc = chorus_isend(comm_, in.data_ptr(), size_t(in.numel()), to_dtype(in), p, &r);
      if (rc != CHORUS_OK) abandon(is, "scatter", rc);
      is.reqs.push_back(r);
    }
  }

  /// alltoall: composed until the library's own all_to_all(v) is used.
  /// Pairwise exchange in rounds k = 0..n-1: in round k rank r pairs with
  /// (k - r) mod n, a perfect matching (a rank paired with itself copies
  /// locally). Within a pair the lower rank sends first and the higher one
  /// receives first, and every rank walks the rounds in the same order, so
  /// the in-order, one-at-a-time execution never waits in a cycle. Empty
  /// blocks are skipped on both sides (the sender's count is the receiver's).
  void compose_alltoall(Issue& is, const std::vector<Block>& send, const std::vector<Block>& recv,
                        int dtype, size_t esz) {
    int n = getSize(), me = getRank();
    for (int k = 0; k < n; ++k) {
      int peer = ((k - me) % n + n) % n;
      if (peer == me) {
        TORCH_CHECK(send[size_t(me)].count == recv[size_t(me)].count,
                    "chorus: alltoall: ", send[size_t(me)].count, " elements to self but ",
                    recv[size_t(me)].count, " expected from self");
        Block s = send[size_t(me)], d = recv[size_t(me)];
        is.post.insert(is.post.begin(), [s, d, esz] {
          if (s.count) std::memcpy(d.ptr, s.ptr, s.count * esz);
        });
        continue;
      }
      auto do_send = [&] {
        const Block& b = send[size_t(peer)];
        if (b.count == 0) return;
        chorus_request_t* r = nullptr;
        int rc = chorus_isend(comm_, b.ptr, b.count, dtype, peer, &r);
        if (rc != CHORUS_OK) abandon(is, "alltoall", rc);
        is.reqs.push_back(r);
      };
      auto do_recv = [&] {
        const Block& b = recv[size_t(peer)];
        if (b.count == 0) return;
        chorus_request_t* r = nullptr;
        int rc = chorus_irecv(comm_, b.ptr, b.count, dtype, peer, &r);
        if (rc != CHORUS_OK) abandon(is, "alltoall", rc);
        is.reqs.push_back(r);
      };
      if (me < peer) {
        do_send();
        do_recv();
      } else {
        do_recv();
        do_send();
      }
    }
  }

  /// A composed op whose k-th request could not be issued: the earlier ones
  /// are already queued and use the buffers, so they are handed to the
  /// completion thread (which keeps the buffers alive), then the error is
  /// raised.
  [[noreturn]] void abandon(Issue& is, const char* name, int rc) {
    std::string msg = std::string(chorus_status_name(rc)) + ": " + chorus_last_error();
    is.post.clear();
    if (!is.reqs.empty())
      push(c10::make_intrusive<ChorusWork>(c10d::OpType::UNKNOWN, name, std::move(is),
                                           c10::IValue()));
    TORCH_CHECK(false, "chorus: ", name, ": ", msg);
  }

  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* name, Issue is,
                                         c10::IValue value, int source = -1) {
    auto w = c10::make_intrusive<ChorusWork>(type, name, std::move(is), std::move(value), source);
    push(w);
    return w;
  }

  void push(c10::intrusive_ptr<ChorusWork> w) {
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      queue_.push_back(std::move(w));
    }
    queue_cv_.notify_one();
  }

  /// The completion thread: requests finish in issue order, so waiting for
  /// them in that order costs nothing.
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
  std::unique_ptr<CallbackPool> pool_ = std::make_unique<CallbackPool>();
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
