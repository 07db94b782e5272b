// TaskPool and ChorusWork (chorus_work.h): completing one torch call's Work
// and its Future once its Chorus request has finished.
#include "chorus_work.h"

#include <stdexcept>
#include <string>

namespace chorus_torch {

TaskPool::~TaskPool() {
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

void TaskPool::post(std::function<void()> fn) {
  std::unique_lock<std::mutex> lock(mu_);
  tasks_.push_back(std::move(fn));
  if (idle_ < tasks_.size())
    threads_.emplace_back([this] { loop(); });
  else
    cv_.notify_one();
}

void TaskPool::loop() {
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

ChorusWork::ChorusWork(c10d::OpType type, const char* name, Issue is, c10::IValue value, int source)
    : c10d::Work(-1, type),
      name_(name),
      is_(std::move(is)),
      value_(std::move(value)),
      source_(source),
      future_(c10::make_intrusive<c10::ivalue::Future>(value_.type())) {}

ChorusWork::~ChorusWork() {
  // Normally empty here: the completion thread owns a reference until done.
  if (is_.req) {
    chorus_wait(is_.req, -1);
    chorus_request_free(is_.req);
  }
}

bool ChorusWork::wait(std::chrono::milliseconds timeout) {
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

int ChorusWork::sourceRank() const {
  const int source = source_.load();
  TORCH_CHECK(source != kNotRecv, "chorus: sourceRank() is only defined for recv");
  TORCH_CHECK(source >= 0,
              "chorus: recv from any source: the sender is known once the receive has "
              "completed successfully; wait() for it first");
  return source;
}

std::vector<at::Tensor> ChorusWork::result() {
  if (value_.isTensorList()) return value_.toTensorVector();
  return {};
}

std::exception_ptr ChorusWork::run() {
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

void ChorusWork::complete(std::exception_ptr eptr) {
  finish(eptr);
  if (eptr)
    future_->setError(eptr);
  else
    future_->markCompleted(value_);
}

std::exception_ptr ChorusWork::received() {
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

}  // namespace chorus_torch
