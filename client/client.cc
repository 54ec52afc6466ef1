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

// The public header's numbers are the wire's: a caller's value goes onto the wire unchanged.
template <typename Enum>
constexpr bool Same(int api, Enum wire) {
  return api == static_cast<int>(wire);
}
using ard::wire::Collective;
using ard::wire::DataType;
using ard::wire::ReduceOp;
static_assert(Same(ARD_OK, Code::kOk) && Same(ARD_CANCELLED, Code::kCancelled) &&
                  Same(ARD_INVALID_ARGUMENT, Code::kInvalidArgument) &&
                  Same(ARD_DEADLINE_EXCEEDED, Code::kDeadlineExceeded) &&
                  Same(ARD_NOT_FOUND, Code::kNotFound) &&
                  Same(ARD_ALREADY_EXISTS, Code::kAlreadyExists) &&
                  Same(ARD_PERMISSION_DENIED, Code::kPermissionDenied) &&
                  Same(ARD_RESOURCE_EXHAUSTED, Code::kResourceExhausted) &&
                  Same(ARD_FAILED_PRECONDITION, Code::kFailedPrecondition) &&
                  Same(ARD_ABORTED, Code::kAborted) && Same(ARD_OUT_OF_RANGE, Code::kOutOfRange) &&
                  Same(ARD_UNIMPLEMENTED, Code::kUnimplemented) &&
                  Same(ARD_INTERNAL, Code::kInternal) && Same(ARD_UNAVAILABLE, Code::kUnavailable),
              "ARD_* codes != wire::Code");
static_assert(Same(ARD_ALLREDUCE, Collective::kAllreduce) &&
                  Same(ARD_ALLGATHER, Collective::kAllgather) &&
                  Same(ARD_BROADCAST, Collective::kBroadcast) &&
                  Same(ARD_ALLTOALL, Collective::kAlltoall) &&
                  Same(ARD_REDUCESCATTER, Collective::kReducescatter) &&
                  Same(ARD_BARRIER, Collective::kBarrier) && Same(ARD_JOIN, Collective::kJoin),
              "ARD_* collectives != wire::Collective");
static_assert(Same(ARD_UINT8, DataType::kUint8) && Same(ARD_INT8, DataType::kInt8) &&
                  Same(ARD_UINT16, DataType::kUint16) && Same(ARD_INT16, DataType::kInt16) &&
                  Same(ARD_INT32, DataType::kInt32) && Same(ARD_INT64, DataType::kInt64) &&
                  Same(ARD_FLOAT16, DataType::kFloat16) &&
                  Same(ARD_BFLOAT16, DataType::kBfloat16) &&
                  Same(ARD_FLOAT32, DataType::kFloat32) && Same(ARD_FLOAT64, DataType::kFloat64) &&
                  Same(ARD_BOOL, DataType::kBool),
              "ARD_* dtypes != wire::DataType");
static_assert(Same(ARD_SUM, ReduceOp::kSum) && Same(ARD_AVERAGE, ReduceOp::kAverage) &&
                  Same(ARD_MIN, ReduceOp::kMin) && Same(ARD_MAX, ReduceOp::kMax) &&
                  Same(ARD_PRODUCT, ReduceOp::kProduct) && Same(ARD_ADASUM, ReduceOp::kAdasum),
              "ARD_* reduce ops != wire::ReduceOp");

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
    ARD_CLIENT_RETURN_IF_ERROR(ard::client::ResolveConfig(options != nullptr ? *options : defaults,
                                                          ard::client::ProcessEnv(), &config));
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

ARD_API int ard_client_hosts_updated(const ard_client* client) {
  return client != nullptr && client->session->hosts_updated() ? 1 : 0;
}

ARD_API const char* ard_client_job(const ard_client* client) {
  return client == nullptr ? "" : client->session->job().c_str();
}

ARD_API void ard_request_init(ard_request* request) {
  if (request == nullptr) return;
  std::memset(request, 0, sizeof(*request));
  request->prescale = 1.0;
  request->postscale = 1.0;
  request->group_id = -1;
}

ARD_API int ard_submit(ard_client* client, const ard_request* request, ard_done_fn done, void* user,
                       uint64_t* handle, char* err, size_t err_len) {
  return Guarded(err, err_len, [&]() -> Status {
    if (client == nullptr || request == nullptr || handle == nullptr) {
      return ard::client::InvalidArgument("ard_submit: client, request or handle is NULL");
    }
    return client->session->Submit(*request, done, user, handle);
  });
}

ARD_API int ard_alloc(ard_client* client, uint64_t bytes, void** data, char* err, size_t err_len) {
  return Guarded(err, err_len, [&]() -> Status {
    if (client == nullptr || data == nullptr) {
      return ard::client::InvalidArgument("ard_alloc: client or data is NULL");
    }
    *data = nullptr;
    return client->session->Allocate(bytes, data);
  });
}

ARD_API int ard_free(ard_client* client, void* data, char* err, size_t err_len) {
  return Guarded(err, err_len, [&]() -> Status {
    if (client == nullptr) return ard::client::InvalidArgument("ard_free: client is NULL");
    return client->session->Free(data);
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
    return client->session->SubmitDevice(*request, device, device_out, stream, done, user, handle);
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
    case ARD_PENDING:
      return "PENDING";
    case ARD_OK:
      return "OK";
    case ARD_CANCELLED:
      return "CANCELLED";
    case ARD_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case ARD_DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case ARD_NOT_FOUND:
      return "NOT_FOUND";
    case ARD_ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case ARD_PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case ARD_RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case ARD_FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case ARD_ABORTED:
      return "ABORTED";
    case ARD_OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case ARD_UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case ARD_INTERNAL:
      return "INTERNAL";
    case ARD_UNAVAILABLE:
      return "UNAVAILABLE";
    // absl codes the daemon never sends, named for completeness.
    case 15:
      return "DATA_LOSS";
    case 16:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

}  // extern "C"
