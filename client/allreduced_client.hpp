// A thin header-only C++ wrapper over the C API in allreduced_client.h, for C++ users (CLI bench,
// tests, a TF op written in C++). It uses nothing but the C API, so it works the same against the
// static `//client:client` library and against libard_client.so.
//
//   ard::Client client;
//   ard::ClientStatus s = ard::Client::Create(nullptr, &client);   // options from the environment
//   ard::PendingResult r;
//   s = client.Submit(request, &r);     // copies the input; returns at once
//   if (r.Wait() == ARD_OK) use(r.data<float>(), r.result().bytes);
//   // r's destructor releases the result (waiting first if it is still pending)
//
// Threads: a Client may be shared by threads like the ard_client it wraps; a PendingResult is
// used by one thread at a time. A PendingResult must not outlive its Client.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "client/allreduced_client.h"

namespace ard {

// The outcome of a call: a code (ARD_OK, ...) and a one-line message.
struct ClientStatus {
  int code = ARD_OK;
  std::string message;
  bool ok() const { return code == ARD_OK; }
  std::string ToString() const { return std::string(ard_code_name(code)) + ": " + message; }
};

// A submitted request, future-like: Wait() for it, read result(), then Release() (or let the
// destructor do it). Move-only.
class PendingResult {
 public:
  PendingResult() = default;
  PendingResult(PendingResult&& other) noexcept { *this = std::move(other); }
  PendingResult& operator=(PendingResult&& other) noexcept {
    if (this != &other) {
      Release();
      client_ = std::exchange(other.client_, nullptr);
      handle_ = std::exchange(other.handle_, 0);
      done_ = std::exchange(other.done_, false);
      result_ = other.result_;
    }
    return *this;
  }
  PendingResult(const PendingResult&) = delete;
  PendingResult& operator=(const PendingResult&) = delete;
  ~PendingResult() { Release(); }

  bool valid() const { return client_ != nullptr; }
  uint64_t handle() const { return handle_; }

  // Waits up to timeout_ms (-1: forever); returns the request's code, or ARD_PENDING while it is
  // still pending.
  int Wait(int timeout_ms = -1) {
    if (client_ == nullptr) return ARD_INVALID_ARGUMENT;
    if (done_) return result_.code;
    ard_result result;
    int code = ard_wait(client_, handle_, timeout_ms, &result);
    if (code == ARD_PENDING) return code;
    result_ = result;
    done_ = true;
    return code;
  }
  bool Ready() { return Wait(0) != ARD_PENDING; }

  // Valid after Wait() returned something other than ARD_PENDING, until Release().
  const ard_result& result() const { return result_; }
  template <typename T>
  const T* data() const { return static_cast<const T*>(result_.data); }
  ClientStatus status() const {
    return {result_.code, result_.message != nullptr ? result_.message : ""};
  }

  // Frees the result (waiting for completion first if needed). Idempotent.
  void Release() {
    if (client_ == nullptr) return;
    if (!done_) Wait(-1);
    ard_release(client_, handle_);
    client_ = nullptr;
    handle_ = 0;
    done_ = false;
    result_ = ard_result{};
  }

 private:
  friend class Client;
  ard_client* client_ = nullptr;  // Not owned.
  uint64_t handle_ = 0;
  bool done_ = false;
  ard_result result_{};
};

// Owns an ard_client: destroyed (pending requests cancelled) with the object. Move-only.
class Client {
 public:
  Client() = default;
  Client(Client&& other) noexcept : client_(std::exchange(other.client_, nullptr)) {}
  Client& operator=(Client&& other) noexcept {
    if (this != &other) {
      ard_client_destroy(client_);
      client_ = std::exchange(other.client_, nullptr);
    }
    return *this;
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client() { ard_client_destroy(client_); }

  // Connects and registers (see ard_client_create); options NULL: everything from the
  // environment. On failure *out is left empty.
  static ClientStatus Create(const ard_options* options, Client* out) {
    char err[512] = "";
    ard_client* client = nullptr;
    int code = ard_client_create(options, &client, err, sizeof(err));
    if (code == ARD_OK) *out = Client(client);
    return {code, err};
  }

  bool valid() const { return client_ != nullptr; }
  ard_client* get() const { return client_; }

  ard_topology Topology() const {
    ard_topology topology{-1, -1, -1, -1, -1, -1};
    if (client_ != nullptr) ard_client_topology(client_, &topology);
    return topology;
  }

  // Submits for Wait(); *handle is set on success.
  ClientStatus Submit(const ard_request& request, uint64_t* handle) {
    return Submit(request, nullptr, nullptr, handle);
  }

  // Submits with a completion callback (see ard_done_fn); Release(handle) after it ran.
  ClientStatus Submit(const ard_request& request, ard_done_fn done, void* user, uint64_t* handle) {
    char err[512] = "";
    int code = ard_submit(client_, &request, done, user, handle, err, sizeof(err));
    return {code, err};
  }

  // Submits and hands the request to a future-like holder.
  ClientStatus Submit(const ard_request& request, PendingResult* out) {
    uint64_t handle = 0;
    ClientStatus status = Submit(request, &handle);
    if (status.ok()) {
      PendingResult pending;
      pending.client_ = client_;
      pending.handle_ = handle;
      *out = std::move(pending);
    }
    return status;
  }

  int Wait(uint64_t handle, int timeout_ms, ard_result* out) {
    return ard_wait(client_, handle, timeout_ms, out);
  }
  void Release(uint64_t handle) { ard_release(client_, handle); }

 private:
  explicit Client(ard_client* client) : client_(client) {}
  ard_client* client_ = nullptr;
};

}  // namespace ard
