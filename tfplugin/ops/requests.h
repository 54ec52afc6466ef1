// What the op kernels share: the client library's dtype of a TensorFlow dtype, its codes as
// TensorFlow statuses, and filling a request. Collectives, dtypes and reduce ops are the ARD_*
// constants of client/allreduced_client.h.
#pragma once

#include <string>
#include <vector>

#include "client/allreduced_client.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/types.h"

namespace ard::tf {

// The ARD_* dtype of a TensorFlow dtype (ARD_UINT8 .. ARD_BOOL); 0 when the daemon does not
// support it.
int WireDtype(::tensorflow::DataType t);

// A client library code and message as a TensorFlow status (the codes are absl's).
inline absl::Status ClientStatus(int code, const char* message) {
  return code == ARD_OK
             ? absl::OkStatus()
             : absl::Status(static_cast<absl::StatusCode>(code),
                            message != nullptr && *message ? message : "allreduced error");
}

// Fills the request fields common to every op: collective (ARD_ALLREDUCE ..), dtype, name, shape,
// data. `shape` and
// `name` must outlive the request.
void FillRequest(const ::tensorflow::Tensor& input, int collective, const std::string& name,
                 std::vector<int64_t>* shape, ard_request* req);

}  // namespace ard::tf
