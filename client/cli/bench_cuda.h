// The CUDA driver API for `allreducectl bench --device gpu`, loaded at run time with
// dlopen("libcuda.so.1") like the client library's own table (client/cuda_driver.h), so the CLI
// links neither libcuda nor libcudart. Declares only what the bench uses (cuda.h's ABI, written
// out so the CLI builds without the toolkit), plus BenchGpuMemory: one worker's device, stream
// and input/output buffers. LoadBenchCuda() once per process; the table is immutable afterwards.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace ard::cli {

struct BenchCuda {
  using CUresult = int;
  using CUdeviceptr = unsigned long long;
  using CUcontext = struct CUctx_st*;
  using CUstream = struct CUstream_st*;

  CUresult (*Init)(unsigned flags);
  CUresult (*DeviceGetCount)(int* count);
  CUresult (*DeviceGet)(int* device, int ordinal);
  CUresult (*DeviceGetName)(char* name, int len, int device);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext* ctx, int device);
  CUresult (*DevicePrimaryCtxRelease)(int device);
  CUresult (*CtxSetCurrent)(CUcontext ctx);
  CUresult (*MemAlloc)(CUdeviceptr* ptr, size_t bytes);
  CUresult (*MemFree)(CUdeviceptr ptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr dst, const void* src, size_t bytes);
  CUresult (*MemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes);
  CUresult (*MemsetD8)(CUdeviceptr dst, unsigned char value, size_t bytes);
  CUresult (*StreamCreate)(CUstream* stream, unsigned flags);
  CUresult (*StreamDestroy)(CUstream stream);
  CUresult (*StreamSynchronize)(CUstream stream);
  CUresult (*GetErrorString)(CUresult error, const char** text);

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

}  // namespace ard::cli
