#include "daemon/gpu/device.h"

namespace ard::gpu {

bool DeviceReductionSupported(wire::DataType dtype) {
  switch (dtype) {
    case wire::DataType::kUint8:
    case wire::DataType::kInt8:
    case wire::DataType::kInt32:
    case wire::DataType::kInt64:
    case wire::DataType::kFloat16:
    case wire::DataType::kBfloat16:
    case wire::DataType::kFloat32:
    case wire::DataType::kFloat64:
      return true;
    default:
      return false;
  }
}

}  // namespace ard::gpu
