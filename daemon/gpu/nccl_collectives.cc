// The collective calls of the real gpu::Device's NCCL communicators (ARD_WITH_CUDA builds only):
// dtype and reduce-op mapping, and average over a number of contributions other than the
// communicator size. Init, groups and async errors are in nccl_communicator.cc.
#include <cstdint>
#include <cstring>

#include "daemon/collectives/half_float.h"
#include "daemon/gpu/cuda_device_internal.h"

namespace ard::gpu::internal {
namespace {

absl::StatusOr<ncclDataType_t> NcclType(wire::DataType dtype) {
  switch (dtype) {
    case wire::DataType::kUint8:
      return ncclUint8;
    case wire::DataType::kInt8:
      return ncclInt8;
    case wire::DataType::kBool:
      return ncclUint8;  // data movement only
    case wire::DataType::kInt32:
      return ncclInt32;
    case wire::DataType::kInt64:
      return ncclInt64;
    case wire::DataType::kFloat16:
      return ncclFloat16;
    case wire::DataType::kBfloat16:
      return ncclBfloat16;
    case wire::DataType::kFloat32:
      return ncclFloat32;
    case wire::DataType::kFloat64:
      return ncclFloat64;
    default:
      return absl::InvalidArgumentError("dtype not supported by NCCL");
  }
}

}  // namespace

absl::Status NcclCommunicator::Allreduce(const void* send, void* recv, size_t count,
                                         wire::DataType dtype, wire::ReduceOp op, int average_over,
                                         Stream& stream) {
  auto type = NcclType(dtype);
  if (!type.ok()) return type.status();
  ncclRedOp_t nccl_op = ncclSum;
  bool custom = false;
  switch (op) {
    case wire::ReduceOp::kSum:
      nccl_op = ncclSum;
      break;
    case wire::ReduceOp::kMin:
      nccl_op = ncclMin;
      break;
    case wire::ReduceOp::kMax:
      nccl_op = ncclMax;
      break;
    case wire::ReduceOp::kProduct:
      nccl_op = ncclProd;
      break;
    case wire::ReduceOp::kAverage:
      if (average_over == size_) {
        nccl_op = ncclAvg;
      } else {
        auto premul = PreMulSum(dtype, *type, average_over);
        if (!premul.ok()) return premul.status();
        nccl_op = *premul;
        custom = true;
      }
      break;
    case wire::ReduceOp::kAdasum:
      return absl::InvalidArgumentError("Adasum is not reduced on GPU communicators");
  }
  cudaSetDevice(device_);
  ncclResult_t res = ncclAllReduce(send, recv, count, *type, nccl_op, comm_, StreamOf(stream));
  if (custom) ncclRedOpDestroy(nccl_op, comm_);  // allowed once the last use is enqueued
  if (!NcclAccepted(res)) return NcclError(res, "ncclAllReduce", comm_);
  return absl::OkStatus();  // ncclInProgress too: the caller polls State()
}

absl::Status NcclCommunicator::Broadcast(const void* send, void* recv, size_t count,
                                         wire::DataType dtype, int root, Stream& stream) {
  auto type = NcclType(dtype);
  if (!type.ok()) return type.status();
  cudaSetDevice(device_);
  ncclResult_t res = ncclBroadcast(send, recv, count, *type, root, comm_, StreamOf(stream));
  if (!NcclAccepted(res)) return NcclError(res, "ncclBroadcast", comm_);
  return absl::OkStatus();  // ncclInProgress too: the caller polls State()
}

absl::Status NcclCommunicator::Allgather(const void* send, void* recv, size_t send_count,
                                         wire::DataType dtype, Stream& stream) {
  auto type = NcclType(dtype);
  if (!type.ok()) return type.status();
  cudaSetDevice(device_);
  ncclResult_t res = ncclAllGather(send, recv, send_count, *type, comm_, StreamOf(stream));
  if (!NcclAccepted(res)) return NcclError(res, "ncclAllGather", comm_);
  return absl::OkStatus();  // ncclInProgress too: the caller polls State()
}

absl::Status NcclCommunicator::ReduceScatter(const void* send, void* recv, size_t recv_count,
                                             wire::DataType dtype, wire::ReduceOp op,
                                             Stream& stream) {
  auto type = NcclType(dtype);
  if (!type.ok()) return type.status();
  ncclRedOp_t nccl_op = op == wire::ReduceOp::kMin       ? ncclMin
                        : op == wire::ReduceOp::kMax     ? ncclMax
                        : op == wire::ReduceOp::kProduct ? ncclProd
                        : op == wire::ReduceOp::kAverage ? ncclAvg
                                                         : ncclSum;
  cudaSetDevice(device_);
  ncclResult_t res =
      ncclReduceScatter(send, recv, recv_count, *type, nccl_op, comm_, StreamOf(stream));
  if (!NcclAccepted(res)) return NcclError(res, "ncclReduceScatter", comm_);
  return absl::OkStatus();  // ncclInProgress too: the caller polls State()
}

absl::StatusOr<ncclRedOp_t> NcclCommunicator::PreMulSum(wire::DataType dtype, ncclDataType_t type,
                                                        int n) {
  alignas(8) unsigned char scalar[8] = {};
  double factor = 1.0 / n;
  switch (dtype) {
    case wire::DataType::kFloat64:
      std::memcpy(scalar, &factor, 8);
      break;
    case wire::DataType::kFloat32: {
      float f = static_cast<float>(factor);
      std::memcpy(scalar, &f, 4);
      break;
    }
    case wire::DataType::kFloat16: {
      uint16_t h = collectives::FloatToHalf(static_cast<float>(factor));
      std::memcpy(scalar, &h, 2);
      break;
    }
    case wire::DataType::kBfloat16: {
      uint16_t h = collectives::FloatToBfloat16(static_cast<float>(factor));
      std::memcpy(scalar, &h, 2);
      break;
    }
    default:
      return absl::UnimplementedError(
          "integer average over several processes per GPU is not supported on the GPU path");
  }
  ncclRedOp_t op;
  ncclResult_t res = ncclRedOpCreatePreMulSum(&op, scalar, type, ncclScalarHostImmediate, comm_);
  if (res != ncclSuccess) return NcclError(res, "ncclRedOpCreatePreMulSum", comm_);
  return op;
}

}  // namespace ard::gpu::internal
