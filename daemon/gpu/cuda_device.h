// The real gpu::Device: a thin layer over the CUDA runtime (static cudart) and NCCL. Built only
// when the build found CUDA and NCCL (ARD_WITH_CUDA); NewCudaDevice() says Unimplemented
// otherwise. Errors name the call, the GPU and the library's message (STYLE.md "Errors").
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/gpu/device.h"

namespace ard::gpu {

// The CUDA/NCCL device. FailedPrecondition when no driver or no GPU is present; Unimplemented in
// a build without CUDA.
absl::StatusOr<std::unique_ptr<Device>> NewCudaDevice();

}  // namespace ard::gpu
