// The compact wire form of a committed tensor (CollectiveResponse.Tensor in
// proto/negotiation.proto): the coordinator encodes each committed tensor's requests once, and
// every host decodes the same bytes into the same ReadyTensor (metadata only), whatever the
// collective. What every taking-part rank shares travels once, which ranks take part travels as
// the joined (absent) ones, and only what differs per rank travels per rank: allgather's first
// dimension, alltoall's splits, a mixed GPU flag; anything else that differs (a mismatch
// validation refuses) travels as that rank's whole metadata. Lossless: a decoded tensor equals
// the encoded one in every field TensorMeta carries (ToMeta). Pure; any thread.
#pragma once

#include "absl/status/statusor.h"
#include "daemon/negotiation/tensor_request.h"
#include "proto/negotiation.pb.h"

namespace ard::negotiation {

// `tensor.ranks` is indexed by rank (its size is the job's size; nullopt: not taking part).
void EncodeTensor(const ReadyTensor& tensor, CollectiveResponse::Tensor* out);

// The inverse for a job of `job_size` ranks; every rank's metadata is validated as FromMeta does.
// A malformed encoding (an unsorted or out-of-range rank list, a column of the wrong length, no
// `common`: a daemon of another version) is InvalidArgument.
absl::StatusOr<ReadyTensor> DecodeTensor(const CollectiveResponse::Tensor& tensor, int job_size);

// A whole committed response (collective, error, join's last rank, every tensor DecodeTensor'd),
// as every host turns a coordinator JobEvent's response into the list it runs.
absl::StatusOr<Response> DecodeResponse(const CollectiveResponse& response, int job_size);

}  // namespace ard::negotiation
