// What the op kernels share: the wire numbers of collectives and dtypes, and filling a request.
#pragma once

#include <string>
#include <vector>

#include "client/allreduced_client.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"

namespace ard::tf {

// wire::Collective numbers.
constexpr int kAllreduce = 1, kAllgather = 2, kBroadcast = 3, kAlltoall = 4, kReducescatter = 5,
              kBarrier = 6, kJoin = 7;

// wire::DataType of a TensorFlow dtype; 0 when the daemon does not support it.
int WireDtype(::tensorflow::DataType t);

// A client library code and message as a TensorFlow status (the codes are absl's).
inline absl::Status ClientStatus(int code, const char* message) {
  return code == 0 ? absl::OkStatus()
                   : absl::Status(static_cast<absl::StatusCode>(code),
                                  message != nullptr && *message ? message : "allreduced error");
}

// Fills the request fields common to every op: collective, dtype, name, shape, data. `shape` and
// `name` must outlive the request.
void FillRequest(const ::tensorflow::Tensor& input, int collective, const std::string& name,
                 std::vector<int64_t>* shape, ard_request* req);

}  // namespace ard::tf
