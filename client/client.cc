// The C API (allreduced_client.h) over ard::client::Session. This file is the exception boundary:
// nothing thrown inside (std::bad_alloc, std::system_error from std::thread) crosses into C.
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>

#include "client/allreduced_client.h"
#include "client/config.h"
#include "client/session.h"

struct ard_client {
  std::unique_ptr<ard::client::Session> session;
};

namespace {

using ard::client::Status;
using ard::wire::Code;

int Report(const Status& status, char* err, size_t err_len) {
  if (err != nullptr && err_len > 0) std::snprintf(err, err_len, "%s", status.message().c_str());
  return status.raw_code();
}

// Runs `body` (returning a Status), converting exceptions to codes.
template <typename Body>
int Guarded(char* err, size_t err_len, Body body) {
  try {
    return Report(body(), err, err_len);
  } catch (const std::bad_alloc&) {
    return Report({Code::kResourceExhausted, "out of memory in the allreduced client"}, err,
                  err_len);
  } catch (const std::exception& e) {
    return Report({Code::kInternal, std::string("allreduced client: ") + e.what()}, err, err_len);
  } catch (...) {
    return Report({Code::kInternal, "allreduced client: unknown exception"}, err, err_len);
  }
}

}  // namespace

extern "C" {

ARD_API void ard_options_init(ard_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof(*options));
  options->rank = options->size = options->local_rank = options->local_size = -1;
}

ARD_API int ard_client_create(const ard_options* options, ard_client** out, char* err,
                              size_t err_len) {
  if (out != nullptr) *out = nullptr;
  return Guarded(err, err_len, [&]() -> Status {
    if (out == nullptr) return ard::client::InvalidArgument("ard_client_create: out is NULL");
    ard_options defaults;
    ard_options_init(&defaults);
    ard::client::ClientConfig config;
    ARD_CLIENT_RETURN_IF_ERROR(ard::client::ResolveConfig(
        options != nullptr ? *options : defaults, ard::client::ProcessEnv(), &config));
    auto client = std::make_unique<ard_client>();
    ARD_CLIENT_RETURN_IF_ERROR(ard::client::Session::Create(config, &client->session));
    *out = client.release();
    return ard::client::OkStatus();
  });
}

ARD_API void ard_client_topology(const ard_client* client, ard_topology* out) {
  if (client == nullptr || out == nullptr) return;
  *out = client->session->topology();
}

ARD_API void ard_request_init(ard_request* request) {
  if (request == nullptr) return;
  std::memset(request, 0, sizeof(*request));
  request->prescale = 1.0;
  request->postscale = 1.0;
  request->group_id = -1;
}

ARD_API int ard_submit(ard_client* client, const ard_request* request, ard_done_fn done,
                       void* user, uint64_t* handle, char* err, size_t err_len) {
  return Guarded(err, err_len, [&]() -> Status {
    if (client == nullptr || request == nullptr || handle == nullptr) {
      return ard::client::InvalidArgument("ard_submit: client, request or handle is NULL");
    }
    return client->session->Submit(*request, done, user, handle);
  });
}

ARD_API int ard_submit_device(ard_client* client, const ard_request* request, int device,
                              void* device_out, void* stream, ard_done_fn done, void* user,
                              uint64_t* handle, char* err, size_t err_len) {
  return Guarded(err, err_len, [&]() -> Status {
    if (client == nullptr || request == nullptr || handle == nullptr || device_out == nullptr) {
      return ard::client::InvalidArgument(
          "ard_submit_device: client, request, device_out or handle is NULL");
    }
    return client->session->SubmitDevice(*request, device, device_out, stream, done, user,
                                         handle);
  });
}

ARD_API int ard_wait(ard_client* client, uint64_t handle, int timeout_ms, ard_result* out) {
  static const char kNull[] = "ard_wait: client or out is NULL";
  static const char kFailed[] = "ard_wait: internal error";
  if (client == nullptr || out == nullptr) {
    if (out != nullptr) *out = ard_result{static_cast<int>(Code::kInvalidArgument), kNull};
    return static_cast<int>(Code::kInvalidArgument);
  }
  try {
    return client->session->Wait(handle, timeout_ms, out);
  } catch (...) {  // std::system_error from a condition variable: practically never
    *out = ard_result{static_cast<int>(Code::kInternal), kFailed};
    return out->code;
  }
}

ARD_API void ard_release(ard_client* client, uint64_t handle) {
  if (client == nullptr) return;
  try {
    client->session->Release(handle);
  } catch (...) {
  }
}

ARD_API void ard_client_destroy(ard_client* client) { delete client; }

ARD_API const char* ard_code_name(int code) {
  switch (code) {
    case -1: return "PENDING";
    case 0: return "OK";
    case 1: return "CANCELLED";
    case 2: return "UNKNOWN";
    case 3: return "INVALID_ARGUMENT";
    case 4: return "DEADLINE_EXCEEDED";
    case 5: return "NOT_FOUND";
    case 6: return "ALREADY_EXISTS";
    case 7: return "PERMISSION_DENIED";
    case 8: return "RESOURCE_EXHAUSTED";
    case 9: return "FAILED_PRECONDITION";
    case 10: return "ABORTED";
    case 11: return "OUT_OF_RANGE";
    case 12: return "UNIMPLEMENTED";
    case 13: return "INTERNAL";
    case 14: return "UNAVAILABLE";
    case 15: return "DATA_LOSS";
    case 16: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

}  // extern "C"
