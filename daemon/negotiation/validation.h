// Cross-rank validation of a tensor every rank submitted: the same collective, dtype, shape rules
// per collective, reduce op, scale factors, root rank and group. Errors use Horovod's message
// shapes ("Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [2, 3], but another
// rank sent a tensor of shape [3, 3].") so users recognise them. Pure; any thread.
#pragma once

#include "absl/status/status.h"
#include "daemon/negotiation/tensor_request.h"

namespace ard::negotiation {

// FailedPrecondition with the message for the first mismatch found, else OK.
absl::Status ValidateReadyTensor(const ReadyTensor& tensor, int job_size);

}  // namespace ard::negotiation
