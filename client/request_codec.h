// Client-side encoding and decoding of request frames (local_wire.h): validation of an
// ard_request against obvious misuse (the daemon validates everything again), the SUBMIT payload,
// and parsing of COMPLETE and ERROR/NOTIFY payloads from the daemon. Pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "client/allreduced_client.h"
#include "client/arena.h"
#include "proto/local_wire.h"
#include "client/status.h"

namespace ard::client {

// InvalidArgument naming the tensor and the field: empty/too long name, unknown collective,
// dtype or reduce op, ndims outside 0..8, negative dimensions, bytes != product(shape) * dtype
// size (tensor collectives) or != 0 (barrier, join), bytes above max_tensor_bytes, NULL data,
// bad splits or group fields.
Status ValidateRequest(const ard_request& request, uint64_t max_tensor_bytes);

// The SUBMIT payload for a validated request whose input sits in `slot` (bytes == 0: segment 0,
// offset 0). The tail is request.splits[0..num_splits).
void EncodeSubmit(const ard_request& request, const InputArena::Slot& slot, wire::Submit* out);

struct DecodedComplete {
  wire::Complete fixed{};
  std::vector<int64_t> splits;
  std::string message;
};

// Internal when the payload's length disagrees with its counts or a count exceeds its limit.
Status DecodeComplete(const char* payload, size_t bytes, DecodedComplete* out);

// ERROR and NOTIFY payloads.
Status DecodeError(const char* payload, size_t bytes, int32_t* code, std::string* message);

// Segment payloads (ADD_SEGMENT / RESULT_SEGMENT).
Status DecodeSegment(const char* payload, size_t bytes, wire::Segment* out);

// "[2, 3]".
std::string ShapeString(const int64_t* shape, int ndims);

}  // namespace ard::client
