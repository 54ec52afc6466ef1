// Converts a rank's request metadata between the local wire form (wire::Submit, in a
// TensorRequest) and the cluster form (TensorMeta in proto/negotiation.proto). Metadata from
// another daemon is validated with the same rules as a local client's SUBMIT. Pure.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "daemon/negotiation/tensor_request.h"
#include "proto/negotiation.pb.h"

namespace ard::negotiation {

TensorMeta ToMeta(const TensorRequest& request);

// A fingerprint of a host's metadata for one tensor (response-cache signature).
uint64_t Signature(const HostReadyTensor& tensor);
// `job_size` bounds the rank.
absl::StatusOr<TensorRequest> FromMeta(const TensorMeta& meta, const std::string& name,
                                       int job_size);

}  // namespace ard::negotiation
