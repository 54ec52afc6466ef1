// The one place absl::Status and grpc::Status convert into each other (STYLE.md "Errors").
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace ard::rpc {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace ard::rpc
