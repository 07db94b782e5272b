// c10d ProcessGroup backed by a Chorus communicator (PyTorch 1.13, CPU
// tensors). Every torch call becomes one Chorus non-blocking request, so the
// returned Work objects are asynchronous and run in issue order on the
// communicator's progress thread, which is also the order torch issues them
// on every rank. Bootstrap goes through the torch Store the process group was
// created with (Chorus's host all-gather hook): no coordinator address needed.
#include <chorus/chorus.h>

#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <pybind11/chrono.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
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
      TORCH_CHECK(false, "chorus: unsupported tensor dtype ", t.scalar_type());
  }
}

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
    default:
      TORCH_CHECK(false, "chorus: unsupported reduce op (SUM, PRODUCT, MIN, MAX are supported)");
  }
}

void check_cpu(const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu(), "chorus: only CPU tensors are supported, got ", t.device());
}

/// Contiguous CPU view of `t`, or a contiguous copy (then `copy_back` is set
/// to write it into `t` once the request completes).
at::Tensor staged(const at::Tensor& t, std::vector<std::function<void()>>& copy_back, bool output) {
  check_cpu(t);
  if (t.is_contiguous()) return t;
  at::Tensor c = t.contiguous();
  if (output) copy_back.push_back([t, c]() mutable { t.copy_(c); });
  return c;
}

/// One Chorus request. Completion is observed by isCompleted()/wait(); the
/// post-processing (copies into non-contiguous or list outputs) runs once, on
/// the thread that observes completion. Keeps its tensors alive until then.
class ChorusWork : public c10d::Work {
 public:
  ChorusWork(c10d::OpType type, chorus_request_t* req, std::vector<at::Tensor> keep,
             std::vector<std::function<void()>> post, std::vector<at::Tensor> outputs)
      : c10d::Work(-1, type),
        req_(req),
        keep_(std::move(keep)),
        post_(std::move(post)),
        outputs_(std::move(outputs)) {}
  ~ChorusWork() override {
    // A Work dropped before completion: wait, so the buffers it keeps alive
    // are not freed under the progress thread.
    if (req_) chorus_wait(req_, -1);
    chorus_request_free(req_);
  }

  bool isCompleted() override {
    observe(0);
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_;
  }

  bool wait(std::chrono::milliseconds timeout) override {
    int ms = timeout == kNoTimeout ? -1 : int(timeout.count());
    observe(ms);
    std::unique_lock<std::mutex> lock(mutex_);
    TORCH_CHECK(completed_, "chorus: operation still pending after ", ms, " ms");
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }

  std::vector<at::Tensor> result() override { return outputs_; }

 private:
  void observe(int timeout_ms) {
    std::lock_guard<std::mutex> guard(observe_mu_);
    if (observed_) return;
    int rc;
    if (timeout_ms == 0) {
      int done = 0;
      rc = chorus_test(req_, &done);
      if (!done) return;
    } else {
      rc = chorus_wait(req_, timeout_ms);
      if (rc == CHORUS_ERR_AGAIN) return;
    }
    observed_ = true;
    std::exception_ptr eptr;
    if (rc != CHORUS_OK) {
      eptr = std::make_exception_ptr(std::runtime_error(
          std::string("chorus: ") + chorus_status_name(rc) + ": " + chorus_last_error()));
    } else {
      try {
        for (auto& f : post_) f();
      } catch (...) {
        eptr = std::current_exception();
      }
    }
    chorus_request_free(req_);
    req_ = nullptr;
    post_.clear();
    keep_.clear();
    finish(eptr);
  }

  std::mutex observe_mu_;
  bool observed_ = false;
  chorus_request_t* req_;
  std::vector<at::Tensor> keep_;
  std::vector<std::function<void()>> post_;
  std::vector<at::Tensor> outputs_;
};

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
  }
  ~ProcessGroupChorus() override { chorus_comm_finalize(comm_); }

  const std::string getBackendName() const override { return "chorus"; }
  chorus_comm_t* comm() const { return comm_; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, "chorus: broadcast takes one tensor");
    std::vector<std::function<void()>> post;
    at::Tensor t = staged(tensors[0], post, true);
    chorus_request_t* r = nullptr;
    if (int rc = chorus_ibroadcast(comm_, t.data_ptr(), size_t(t.numel()), to_dtype(t),
                                   int(opts.rootRank), &r))
      fail("broadcast", rc);
    return make(c10d::OpType::BROADCAST, r, {t}, std::move(post), tensors);
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, "chorus: allreduce takes one tensor");
    int op = to_op(opts.reduceOp);
    std::vector<std::function<void()>> post;
    at::Tensor t = staged(tensors[0], post, true);
    chorus_request_t* r = nullptr;
    if (int rc = chorus_iall_reduce(comm_, t.data_ptr(), t.data_ptr(), size_t(t.numel()),
                                    to_dtype(t), op, &r))
      fail("allreduce", rc);
    return make(c10d::OpType::ALLREDUCE, r, {t}, std::move(post), tensors);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions&) override {
    TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
                "chorus: allgather takes one input and one list");
    TORCH_CHECK(int(outputs[0].size()) == getSize(),
                "chorus: allgather output list must have world_size tensors");
    std::vector<std::function<void()>> post;
    at::Tensor in = staged(inputs[0], post, false);
    for (auto& o : outputs[0])
      TORCH_CHECK(o.numel() == in.numel() && o.scalar_type() == in.scalar_type(),
                  "chorus: allgather outputs must match the input's size and dtype");
    at::Tensor flat = at::empty({int64_t(getSize()) * in.numel()}, in.options());
    auto outs = outputs[0];
    post.push_back([flat, outs, n = in.numel()]() mutable {
      for (size_t i = 0; i < outs.size(); ++i)
        outs[i].copy_(flat.narrow(0, int64_t(i) * n, n).view(outs[i].sizes()));
    });
    chorus_request_t* r = nullptr;
    if (int rc = chorus_iall_gather(comm_, in.data_ptr(), flat.data_ptr(), size_t(in.numel()),
                                    to_dtype(in), &r))
      fail("allgather", rc);
    return make(c10d::OpType::ALLGATHER, r, {in, flat}, std::move(post), outputs[0]);
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions&) override {
    TORCH_CHECK(output.numel() == input.numel() * getSize(),
                "chorus: output must be world_size times the input");
    std::vector<std::function<void()>> post;
    at::Tensor in = staged(input, post, false);
    at::Tensor out = staged(output, post, true);
    chorus_request_t* r = nullptr;
    if (int rc = chorus_iall_gather(comm_, in.data_ptr(), out.data_ptr(), size_t(in.numel()),
                                    to_dtype(in), &r))
      fail("allgather", rc);
    return make(c10d::OpType::_ALLGATHER_BASE, r, {in, out}, std::move(post), {output});
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
                "chorus: reduce_scatter takes one output and one list");
    TORCH_CHECK(int(inputs[0].size()) == getSize(),
                "chorus: reduce_scatter input list must have world_size tensors");
    int op = to_op(opts.reduceOp);
    std::vector<std::function<void()>> post;
    at::Tensor out = staged(outputs[0], post, true);
    std::vector<at::Tensor> flat_parts;
    for (auto& t : inputs[0]) {
      check_cpu(t);
      TORCH_CHECK(t.numel() == out.numel() && t.scalar_type() == out.scalar_type(),
                  "chorus: reduce_scatter inputs must match the output's size and dtype");
      flat_parts.push_back(t.reshape({-1}));
    }
    at::Tensor in = at::cat(flat_parts);
    chorus_request_t* r = nullptr;
    if (int rc = chorus_ireduce_scatter(comm_, in.data_ptr(), out.data_ptr(), size_t(out.numel()),
                                        to_dtype(out), op, &r))
      fail("reduce_scatter", rc);
    return make(c10d::OpType::REDUCE_SCATTER, r, {in, out}, std::move(post), outputs);
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(input.numel() == output.numel() * getSize(),
                "chorus: input must be world_size times the output");
    int op = to_op(opts.reduceOp);
    std::vector<std::function<void()>> post;
    at::Tensor in = staged(input, post, false);
    at::Tensor out = staged(output, post, true);
    chorus_request_t* r = nullptr;
    if (int rc = chorus_ireduce_scatter(comm_, in.data_ptr(), out.data_ptr(), size_t(out.numel()),
                                        to_dtype(out), op, &r))
      fail("reduce_scatter", rc);
    return make(c10d::OpType::_REDUCE_SCATTER_BASE, r, {in, out}, std::move(post), {output});
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions&) override {
    chorus_request_t* r = nullptr;
    if (int rc = chorus_ibarrier(comm_, &r)) fail("barrier", rc);
    return make(c10d::OpType::BARRIER, r, {}, {}, {});
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "chorus: send takes one tensor");
    TORCH_CHECK(tag == 0,
                "chorus: send/recv tags are not supported (messages match in order); got tag ",
                tag);
    std::vector<std::function<void()>> post;
    at::Tensor t = staged(tensors[0], post, false);
    chorus_request_t* r = nullptr;
    if (int rc = chorus_isend(comm_, t.data_ptr(), size_t(t.numel()), to_dtype(t), dst, &r))
      fail("send", rc);
    return make(c10d::OpType::SEND, r, {t}, std::move(post), tensors);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    TORCH_CHECK(tensors.size() == 1, "chorus: recv takes one tensor");
    TORCH_CHECK(tag == 0,
                "chorus: send/recv tags are not supported (messages match in order); got tag ",
                tag);
    std::vector<std::function<void()>> post;
    at::Tensor t = staged(tensors[0], post, true);
    chorus_request_t* r = nullptr;
    if (int rc = chorus_irecv(comm_, t.data_ptr(), size_t(t.numel()), to_dtype(t), src, &r))
      fail("recv", rc);
    return make(c10d::OpType::RECV, r, {t}, std::move(post), tensors);
  }

 private:
  c10::intrusive_ptr<c10d::Work> make(c10d::OpType type, chorus_request_t* r,
                                      std::vector<at::Tensor> keep,
                                      std::vector<std::function<void()>> post,
                                      std::vector<at::Tensor> outputs) {
    return c10::make_intrusive<ChorusWork>(type, r, std::move(keep), std::move(post),
                                           std::move(outputs));
  }

  chorus_comm_t* comm_ = nullptr;
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
        "Create a Chorus-backed c10d ProcessGroup (bootstraps through `store`).");
  m.def("counters", &chorus_torch::counters, "Counters of a chorus process group as a dict.");
}
