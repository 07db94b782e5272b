// Status and Result<T>: how errors travel inside the core without exceptions.
#pragma once

#include <chorus/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace chorus::core {

/// A status code (chorus_status_t) with the message that explains it.
/// Cheap to move; OK carries no message.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(int code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return {}; }

  bool is_ok() const { return code_ == CHORUS_OK; }
  int code() const { return code_; }
  const std::string& message() const { return message_; }

  /// The same status with "context: " put in front of the message, e.g.
  /// "while connecting rank 3 -> 5: connection refused".
  Status with_context(std::string_view context) const {
    if (is_ok()) return *this;
    return {code_, std::string(context) + ": " + message_};
  }

 private:
  int code_ = CHORUS_OK;
  std::string message_;
};

/// A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  T& operator*() { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace chorus::core
