// A minimal status value for the client library, which may not link Abseil (it is loaded into
// TensorFlow's process, which carries its own copy). Codes are wire::Code, i.e. absl's numbering,
// so they pass unchanged through the C API. Value type; any thread.
#pragma once

#include <string.h>

#include <string>
#include <utility>

#include "proto/local_wire.h"

namespace ard::client {

class Status {
 public:
  Status() = default;
  Status(wire::Code code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == wire::Code::kOk; }
  wire::Code code() const { return code_; }
  int raw_code() const { return static_cast<int>(code_); }
  const std::string& message() const { return message_; }

 private:
  wire::Code code_ = wire::Code::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) {
  return {wire::Code::kInvalidArgument, std::move(m)};
}
inline Status Unavailable(std::string m) { return {wire::Code::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {wire::Code::kInternal, std::move(m)}; }
inline Status ResourceExhausted(std::string m) {
  return {wire::Code::kResourceExhausted, std::move(m)};
}

// "what: strerror(err)" for a failed system call (GNU strerror_r: thread-safe).
inline std::string ErrnoMessage(const std::string& what, int err) {
  char buf[128];
  return what + ": " + strerror_r(err, buf, sizeof(buf));
}

}  // namespace ard::client

#define ARD_CLIENT_RETURN_IF_ERROR(expr)         \
  do {                                           \
    ::ard::client::Status ard_status_ = (expr);  \
    if (!ard_status_.ok()) return ard_status_;   \
  } while (0)
