#include "client/request_codec.h"

#include <cmath>
#include <cstring>

namespace ard::client {
namespace {

using wire::Collective;

bool IsTensorCollective(int collective) {
  return collective != static_cast<int>(Collective::kBarrier) &&
         collective != static_cast<int>(Collective::kJoin);
}

bool Reduces(int collective) {
  return collective == static_cast<int>(Collective::kAllreduce) ||
         collective == static_cast<int>(Collective::kReducescatter);
}

// product(shape) * element_bytes, or false on a negative dimension or overflow.
bool TensorBytes(const int64_t* shape, int ndims, uint64_t element_bytes, uint64_t* out) {
  unsigned __int128 total = element_bytes;
  for (int i = 0; i < ndims; ++i) {
    if (shape[i] < 0) return false;
    total *= static_cast<uint64_t>(shape[i]);
    if (total > UINT64_MAX) return false;
  }
  *out = static_cast<uint64_t>(total);
  return true;
}

Status CheckShapeAndBytes(const ard_request& r, const std::string& what) {
  if (r.ndims < 0 || r.ndims > wire::kMaxDims) {
    return InvalidArgument(what + ": ndims " + std::to_string(r.ndims) + " outside 0.." +
                           std::to_string(wire::kMaxDims));
  }
  if (r.ndims > 0 && r.shape == nullptr) return InvalidArgument(what + ": shape is NULL");
  if (!IsTensorCollective(r.collective)) {
    if (r.bytes != 0) return InvalidArgument(what + ": barrier and join take no data");
    return OkStatus();
  }
  size_t element = wire::DataTypeSize(static_cast<uint32_t>(r.dtype));
  if (element == 0) return InvalidArgument(what + ": unknown dtype " + std::to_string(r.dtype));
  uint64_t expected = 0;
  if (!TensorBytes(r.shape, r.ndims, element, &expected)) {
    return InvalidArgument(what + ": bad shape " + ShapeString(r.shape, r.ndims));
  }
  if (r.bytes != expected) {
    return InvalidArgument(what + ": bytes " + std::to_string(r.bytes) + " != shape " +
                           ShapeString(r.shape, r.ndims) + " x " + std::to_string(element) +
                           "-byte elements = " + std::to_string(expected));
  }
  return OkStatus();
}

Status CheckOperation(const ard_request& r, const std::string& what) {
  if (Reduces(r.collective)) {
    if (r.reduce_op < static_cast<int>(wire::ReduceOp::kSum) ||
        r.reduce_op > static_cast<int>(wire::ReduceOp::kAdasum)) {
      return InvalidArgument(what + ": unknown reduce op " + std::to_string(r.reduce_op));
    }
    if (!std::isfinite(r.prescale) || !std::isfinite(r.postscale)) {
      return InvalidArgument(what + ": prescale and postscale must be finite");
    }
  }
  if (r.collective == static_cast<int>(Collective::kBroadcast) && r.root_rank < 0) {
    return InvalidArgument(what + ": root_rank " + std::to_string(r.root_rank) + " < 0");
  }
  if (r.group_id < -1 || (r.group_id >= 0 && r.group_size < 1)) {
    return InvalidArgument(what + ": group_id " + std::to_string(r.group_id) + " with group_size " +
                           std::to_string(r.group_size));
  }
  return OkStatus();
}

Status CheckSplits(const ard_request& r, const std::string& what) {
  if (r.num_splits == 0) return OkStatus();
  if (r.collective != static_cast<int>(Collective::kAlltoall)) {
    return InvalidArgument(what + ": splits are only for alltoall");
  }
  if (r.num_splits < 0 || static_cast<uint32_t>(r.num_splits) > wire::kMaxSplits ||
      r.splits == nullptr) {
    return InvalidArgument(what + ": num_splits " + std::to_string(r.num_splits) +
                           " outside 0.." + std::to_string(wire::kMaxSplits) + " or splits NULL");
  }
  int64_t sum = 0;
  for (int i = 0; i < r.num_splits; ++i) {
    if (r.splits[i] < 0 || (r.ndims > 0 && r.splits[i] > r.shape[0])) {
      return InvalidArgument(what + ": split " + std::to_string(i) + " out of range");
    }
    sum += r.splits[i];
  }
  if (r.ndims > 0 && sum != r.shape[0]) {
    return InvalidArgument(what + ": splits sum to " + std::to_string(sum) +
                           ", the first dimension is " + std::to_string(r.shape[0]));
  }
  return OkStatus();
}

}  // namespace

std::string ShapeString(const int64_t* shape, int ndims) {
  std::string out = "[";
  for (int i = 0; shape != nullptr && i < ndims; ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

Status ValidateRequest(const ard_request& r, uint64_t max_tensor_bytes) {
  if (r.name == nullptr || r.name[0] == '\0') return InvalidArgument("tensor name is empty");
  size_t name_bytes = strnlen(r.name, wire::kTensorNameBytes);
  if (name_bytes >= wire::kTensorNameBytes) {
    return InvalidArgument("tensor name '" + std::string(r.name, 32) + "...' is longer than " +
                           std::to_string(wire::kTensorNameBytes - 1) + " bytes");
  }
  std::string what = "tensor '" + std::string(r.name, name_bytes) + "'";
  if (r.collective < static_cast<int>(Collective::kAllreduce) ||
      r.collective > static_cast<int>(Collective::kJoin)) {
    return InvalidArgument(what + ": unknown collective " + std::to_string(r.collective));
  }
  ARD_CLIENT_RETURN_IF_ERROR(CheckShapeAndBytes(r, what));
  if (r.bytes > max_tensor_bytes) {
    return InvalidArgument(what + ": " + std::to_string(r.bytes) + " bytes exceed the limit of " +
                           std::to_string(max_tensor_bytes));
  }
  if (r.bytes > 0 && r.data == nullptr) return InvalidArgument(what + ": data is NULL");
  ARD_CLIENT_RETURN_IF_ERROR(CheckOperation(r, what));
  return CheckSplits(r, what);
}

void EncodeSubmit(const ard_request& r, const InputArena::Slot& slot, wire::Submit* out) {
  *out = wire::Submit{};
  out->collective = static_cast<uint32_t>(r.collective);
  out->dtype = static_cast<uint32_t>(r.dtype);
  out->reduce_op = static_cast<uint32_t>(r.reduce_op);
  out->root_rank = r.root_rank;
  out->prescale = r.prescale;
  out->postscale = r.postscale;
  std::strncpy(out->name, r.name, sizeof(out->name) - 1);
  out->ndims = static_cast<uint32_t>(r.ndims);
  for (int i = 0; i < r.ndims; ++i) out->shape[i] = r.shape[i];
  out->segment = slot.segment;
  out->offset = slot.offset;
  out->bytes = r.bytes;
  out->group_id = r.group_id;
  out->group_size = r.group_id >= 0 ? r.group_size : 0;
  out->num_splits = static_cast<uint32_t>(r.num_splits);
}

Status DecodeComplete(const char* payload, size_t bytes, DecodedComplete* out) {
  if (bytes < sizeof(wire::Complete)) return Internal("COMPLETE frame too short");
  std::memcpy(&out->fixed, payload, sizeof(wire::Complete));
  const wire::Complete& c = out->fixed;
  if (c.ndims > static_cast<uint32_t>(wire::kMaxDims) || c.num_splits > wire::kMaxSplits ||
      c.message_bytes > wire::kMaxMessageBytes) {
    return Internal("COMPLETE frame with ndims, num_splits or message_bytes over the limit");
  }
  size_t tail = size_t{c.num_splits} * sizeof(int64_t);
  if (bytes != sizeof(wire::Complete) + tail + c.message_bytes) {
    return Internal("COMPLETE frame length disagrees with num_splits and message_bytes");
  }
  out->splits.resize(c.num_splits);
  if (tail > 0) std::memcpy(out->splits.data(), payload + sizeof(wire::Complete), tail);
  out->message.assign(payload + sizeof(wire::Complete) + tail, c.message_bytes);
  return OkStatus();
}

Status DecodeError(const char* payload, size_t bytes, int32_t* code, std::string* message) {
  wire::Error error;
  if (bytes < sizeof(error)) return Internal("ERROR/NOTIFY frame too short");
  std::memcpy(&error, payload, sizeof(error));
  if (error.message_bytes > wire::kMaxMessageBytes ||
      bytes != sizeof(error) + error.message_bytes) {
    return Internal("ERROR/NOTIFY frame length disagrees with message_bytes");
  }
  *code = error.code;
  message->assign(payload + sizeof(error), error.message_bytes);
  return OkStatus();
}

Status DecodeSegment(const char* payload, size_t bytes, wire::Segment* out) {
  if (bytes != sizeof(wire::Segment)) return Internal("segment frame of the wrong length");
  std::memcpy(out, payload, sizeof(wire::Segment));
  if (out->bytes == 0) return Internal("segment frame with 0 bytes");
  return OkStatus();
}

}  // namespace ard::client
