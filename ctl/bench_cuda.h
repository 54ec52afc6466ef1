// The CUDA driver API for `allreducectl bench --device gpu`: the client library's own table
// (client/cuda_driver.h, loaded with dlopen("libcuda.so.1"), so the CLI links neither libcuda nor
// libcudart) with absl::Status errors, plus BenchGpuMemory: one worker's device, stream and
// input/output buffers. LoadBenchCuda() once per process; the table is immutable afterwards.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "client/cuda_driver.h"

namespace ard::ctl {

struct BenchCuda {
  using CUresult = client::cuda::CUresult;
  using CUdeviceptr = client::cuda::CUdeviceptr;
  using CUcontext = client::cuda::CUcontext;
  using CUstream = client::cuda::CUstream;

  const client::cuda::Driver* d = nullptr;
  int device_count = 0;  // GPUs the driver sees (at least 1 once loaded)

  // Internal "call: CUDA_ERROR_... text (code)" for a failed call; OkStatus for success.
  absl::Status Check(const char* call, CUresult result) const;
};

// The driver, loaded and cuInit'ed once per process (no context is created). FailedPrecondition
// "no CUDA driver/device: ..." when libcuda.so.1 is missing, lacks an entry point, cuInit fails
// or the driver sees no GPU.
absl::Status LoadBenchCuda(const BenchCuda** out);

// One bench worker's GPU side: the device's primary context made current on the calling thread,
// a stream of its own, and device buffers for the current size. Not thread-safe; use it from the
// thread that called Init.
class BenchGpuMemory {
 public:
  BenchGpuMemory() = default;
  BenchGpuMemory(const BenchGpuMemory&) = delete;
  BenchGpuMemory& operator=(const BenchGpuMemory&) = delete;
  ~BenchGpuMemory();

  absl::Status Init(const BenchCuda* cuda, int device);
  // Makes this device's context current on the calling thread again (several devices, one
  // thread: the NCCL peer).
  absl::Status Activate() const;
  // (Re)allocates input and output (at least 1 byte each), copies `input` in, zeroes output.
  absl::Status Prepare(const void* input, size_t input_bytes, size_t output_bytes);
  absl::Status Synchronize() const;
  absl::Status CopyOut(void* host, size_t bytes) const;

  int device() const { return device_; }
  void* stream() const { return stream_; }
  void* input() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(input_)); }
  void* output() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(output_)); }

 private:
  void FreeBuffers();

  const BenchCuda* cuda_ = nullptr;
  int device_ = -1;
  BenchCuda::CUcontext ctx_ = nullptr;
  BenchCuda::CUstream stream_ = nullptr;
  BenchCuda::CUdeviceptr input_ = 0, output_ = 0;
};

}  // namespace ard::ctl
