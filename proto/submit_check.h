// The rules a SUBMIT's metadata follows (the local wire format, local_wire.h): the checks the
// daemon's frame codec applies to every SUBMIT from a client, and the coordinator to metadata
// from other daemons. Bottom layer: both sides include it. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "proto/local_wire.h"

namespace ard::wire {

// InvalidArgument ("bad frame: ...") unless `submit` and its alltoall `splits` are well formed:
// a known collective, dtype and reduce op, a NUL-terminated name, a shape whose size matches
// `bytes` within kMaxTensorBytes, an aligned offset, splits summing to the first dimension.
absl::Status ValidateSubmit(const Submit& submit, const std::vector<int64_t>& splits);

// Number of elements of a shape, or -1 when a dimension is negative or the product overflows.
int64_t NumElements(const int64_t* shape, uint32_t ndims);

// "[2, 3]" as in Horovod's messages.
std::string ShapeString(const int64_t* shape, uint32_t ndims);

}  // namespace ard::wire
