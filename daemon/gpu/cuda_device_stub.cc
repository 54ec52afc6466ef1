// NewCudaDevice in a build without CUDA/NCCL.
#include "daemon/gpu/cuda_device.h"

namespace ard::gpu {

absl::StatusOr<std::unique_ptr<Device>> NewCudaDevice() {
  return absl::UnimplementedError("this allreduced was built without CUDA and NCCL");
}

}  // namespace ard::gpu
