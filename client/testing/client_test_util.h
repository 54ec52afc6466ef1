// Helpers shared by the client library's tests: options pointing at a FakeDaemon (nothing taken
// from the test's environment), float32 allreduce requests, and a thread-safe collector for
// completion callbacks. Test-only; header-only.
#pragma once

#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "client/allreduced_client.h"
#include "client/testing/fake_daemon.h"

namespace ard::client::testing {

// ard_wait's timeout in tests: long enough never to fire, finite so a bug fails instead of hanging.
inline constexpr int kWaitMs = 20000;

inline ard_options TestOptions(const FakeDaemon& daemon) {
  ard_options options;
  ard_options_init(&options);
  options.socket_path = daemon.socket_path().c_str();
  options.job = "testjob";
  options.rank = 0;
  options.size = 1;
  options.local_rank = 0;
  options.local_size = 1;
  options.timeout_ms = 10000;
  options.arena_segment_bytes = 1 << 20;
  options.arena_max_bytes = 64 << 20;
  return options;
}

inline ard_client* MustCreate(const ard_options& options) {
  char err[512] = "";
  ard_client* client = nullptr;
  int code = ard_client_create(&options, &client, err, sizeof(err));
  INFO(err);
  REQUIRE(code == ARD_OK);
  REQUIRE(client != nullptr);
  return client;
}

// A float32 allreduce of `values` (shape [n]) named `name`; owns what the request points to.
struct FloatTensor {
  FloatTensor(std::string tensor_name, std::vector<float> tensor_values)
      : name(std::move(tensor_name)), values(std::move(tensor_values)) {
    shape[0] = static_cast<int64_t>(values.size());
    ard_request_init(&request);
    request.collective = ARD_ALLREDUCE;
    request.dtype = ARD_FLOAT32;
    request.reduce_op = ARD_SUM;
    request.name = name.c_str();
    request.ndims = 1;
    request.shape = shape;
    request.data = values.data();
    request.bytes = values.size() * sizeof(float);
  }
  FloatTensor(const FloatTensor&) = delete;

  std::string name;
  std::vector<float> values;
  int64_t shape[1];
  ard_request request;
};

// True when `result` holds 2 * `input` (the fake's float32 allreduce).
inline bool IsDoubled(const ard_result& result, const std::vector<float>& input) {
  if (result.code != ARD_OK || result.bytes != input.size() * sizeof(float)) return false;
  if (result.ndims != 1 || result.shape[0] != static_cast<int64_t>(input.size())) return false;
  std::vector<float> out(input.size());
  if (!out.empty()) std::memcpy(out.data(), result.data, result.bytes);
  for (size_t i = 0; i < input.size(); ++i) {
    if (out[i] != 2 * input[i]) return false;
  }
  return true;
}

inline std::vector<float> Ramp(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

inline uint64_t MustSubmit(ard_client* client, const ard_request& request,
                           ard_done_fn done = nullptr, void* user = nullptr) {
  char err[512] = "";
  uint64_t handle = 0;
  int code = ard_submit(client, &request, done, user, &handle, err, sizeof(err));
  INFO(err);
  REQUIRE(code == ARD_OK);
  return handle;
}

// Collects callback invocations: code, message and a copy of the data per handle.
struct Collector {
  struct Entry {
    int calls = 0;
    int code = -100;
    std::string message;
    std::vector<char> data;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, Entry> entries;
  int total_calls = 0;
  ard_client* release_from_callback = nullptr;  // set: the callback calls ard_release

  static void Done(void* user, uint64_t handle, const ard_result* result) {
    auto* self = static_cast<Collector*>(user);
    std::lock_guard<std::mutex> lock(self->mu);
    Entry& e = self->entries[handle];
    ++e.calls;
    ++self->total_calls;
    e.code = result->code;
    e.message = result->message;
    const char* data = static_cast<const char*>(result->data);
    e.data.assign(data, data + result->bytes);
    if (self->release_from_callback != nullptr) ard_release(self->release_from_callback, handle);
    self->cv.notify_all();
  }

  bool WaitForCalls(int n, int timeout_ms = 10000) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                       [&] { return total_calls >= n; });
  }
};

}  // namespace ard::client::testing
