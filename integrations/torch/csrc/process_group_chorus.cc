// The chorus_torch extension module: ProcessGroupChorus's construction
// (bootstrapping through the torch Store the group was created with, via
// Chorus's host all-gather hook: no coordinator address needed), its
// destruction, the completion thread that finishes collectives in issue
// order, and the Python functions create_process_group and counters.
#include "process_group_chorus.h"
#include "tensor_args.h"

#include <chorus/chorus.h>

#include <torch/extension.h>

#include <pybind11/chrono.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace chorus_torch {

namespace {

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

}  // namespace

ProcessGroupChorus::ProcessGroupChorus(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                       int size, std::chrono::milliseconds timeout)
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
  if (int rc = chorus_comm_init(&o, &comm_); rc != CHORUS_OK) fail("creating the communicator", rc);
  completer_ = std::thread([this] { complete_loop(); });
}

ProcessGroupChorus::~ProcessGroupChorus() {
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

c10::intrusive_ptr<c10d::Work> ProcessGroupChorus::enqueue(c10d::OpType type, const char* name,
                                                           Issue is, c10::IValue value,
                                                           int source) {
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

void ProcessGroupChorus::complete_loop() {
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
