// An optional value kept on the heap: absent, it costs one pointer; present, one allocation of T.
// For vectors indexed densely by something of which few entries are present (negotiation's
// `ReadyTensor::ranks`: one entry per rank of a job, often only this host's ranks set), where
// std::optional<T> would pay sizeof(T) for every absent entry. Copies are deep (value semantics,
// as std::optional's; one allocation more than copying a std::optional); moves only move the
// pointer and leave the source absent (a moved-from std::optional keeps a moved-from value).
// Same thread rules as T.
#pragma once

#include <memory>
#include <optional>
#include <utility>

#include "daemon/common/status_macros.h"

namespace ard {

template <typename T>
class HeapOptional {
 public:
  HeapOptional() = default;
  HeapOptional(std::nullopt_t) {}  // NOLINT: implicit, as std::optional's
  HeapOptional(const T& value) : value_(std::make_unique<T>(value)) {}        // NOLINT
  HeapOptional(T&& value) : value_(std::make_unique<T>(std::move(value))) {}  // NOLINT
  HeapOptional(const HeapOptional& other)
      : value_(other.value_ ? std::make_unique<T>(*other.value_) : nullptr) {}
  HeapOptional(HeapOptional&&) noexcept = default;
  ~HeapOptional() = default;

  HeapOptional& operator=(const HeapOptional& other) {
    if (!other.value_) {
      value_.reset();
    } else if (this != &other) {
      *this = *other.value_;
    }
    return *this;
  }
  HeapOptional& operator=(HeapOptional&&) noexcept = default;
  HeapOptional& operator=(std::nullopt_t) {
    value_.reset();
    return *this;
  }
  // A present value is assigned in place: no allocation.
  HeapOptional& operator=(const T& value) {
    if (value_) {
      *value_ = value;
    } else {
      value_ = std::make_unique<T>(value);
    }
    return *this;
  }
  HeapOptional& operator=(T&& value) {
    if (value_) {
      *value_ = std::move(value);
    } else {
      value_ = std::make_unique<T>(std::move(value));
    }
    return *this;
  }

  template <typename... Args>
  T& emplace(Args&&... args) {
    value_ = std::make_unique<T>(std::forward<Args>(args)...);
    return *value_;
  }
  void reset() { value_.reset(); }

  bool has_value() const { return value_ != nullptr; }
  explicit operator bool() const { return has_value(); }

  // As std::optional's: undefined when absent (the callers test first).
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }
  T* operator->() { return value_.get(); }
  const T* operator->() const { return value_.get(); }
  // Checked: absent is a broken invariant (no exceptions here, unlike std::optional's).
  T& value() {
    ARD_CHECK(value_ != nullptr);
    return *value_;
  }
  const T& value() const {
    ARD_CHECK(value_ != nullptr);
    return *value_;
  }

 private:
  std::unique_ptr<T> value_;
};

}  // namespace ard
