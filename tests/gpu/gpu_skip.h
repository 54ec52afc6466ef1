// tests/gpu: every test first gets the real CUDA/NCCL device; without one (no GPU, no driver, or
// a build without CUDA) it prints why and passes without running anything — a skip, not a result.
#pragma once

#include <cstdio>
#include <memory>

#include "daemon/gpu/cuda_device.h"

namespace ard::gpu::testing {

// The device, or null after printing "SKIPPED (no GPU): ...".
inline std::unique_ptr<Device> DeviceOrSkip(const char* test) {
  auto device = NewCudaDevice();
  if (!device.ok()) {
    std::printf("SKIPPED (no GPU) %s: %s\n", test, std::string(device.status().message()).c_str());
    std::fflush(stdout);
    return nullptr;
  }
  return std::move(*device);
}

}  // namespace ard::gpu::testing
