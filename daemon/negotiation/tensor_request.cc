#include "daemon/negotiation/tensor_request.h"

namespace ard::negotiation {

const TensorRequest& ReadyTensor::first() const {
  for (const auto& r : ranks) {
    if (r) return *r;
  }
  static const TensorRequest* const kNone = new TensorRequest();
  return *kNone;
}

const char* CollectiveName(wire::Collective collective) {
  switch (collective) {
    case wire::Collective::kAllreduce: return "ALLREDUCE";
    case wire::Collective::kAllgather: return "ALLGATHER";
    case wire::Collective::kBroadcast: return "BROADCAST";
    case wire::Collective::kAlltoall: return "ALLTOALL";
    case wire::Collective::kReducescatter: return "REDUCESCATTER";
    case wire::Collective::kBarrier: return "BARRIER";
    case wire::Collective::kJoin: return "JOIN";
  }
  return "UNKNOWN";
}

const char* DataTypeName(uint32_t dtype) {
  switch (static_cast<wire::DataType>(dtype)) {
    case wire::DataType::kUint8: return "uint8";
    case wire::DataType::kInt8: return "int8";
    case wire::DataType::kUint16: return "uint16";
    case wire::DataType::kInt16: return "int16";
    case wire::DataType::kInt32: return "int32";
    case wire::DataType::kInt64: return "int64";
    case wire::DataType::kFloat16: return "float16";
    case wire::DataType::kBfloat16: return "bfloat16";
    case wire::DataType::kFloat32: return "float32";
    case wire::DataType::kFloat64: return "float64";
    case wire::DataType::kBool: return "bool";
  }
  return "unknown";
}

const char* ReduceOpName(uint32_t op) {
  switch (static_cast<wire::ReduceOp>(op)) {
    case wire::ReduceOp::kSum: return "Sum";
    case wire::ReduceOp::kAverage: return "Average";
    case wire::ReduceOp::kMin: return "Min";
    case wire::ReduceOp::kMax: return "Max";
    case wire::ReduceOp::kProduct: return "Product";
    case wire::ReduceOp::kAdasum: return "Adasum";
  }
  return "Unknown";
}

}  // namespace ard::negotiation
