// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1") so the client library links
// only libc/libstdc++ and never mixes CUDA runtimes with TensorFlow's (DESIGN.md "GPU path").
// Declares the few driver types and entry points the GPU path (and `allreducectl bench --device
// gpu`) uses; their ABI is the driver's (cuda.h), written out here so the client builds without
// the CUDA toolkit. Load() once; the loaded table is immutable and safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "client/status.h"

namespace ard::client::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
struct CUipcMemHandle {
  char reserved[64];
};
struct CUipcEventHandle {
  char reserved[64];
};

inline constexpr CUresult kSuccess = 0;
inline constexpr unsigned kEventDisableTiming = 0x2;  // CU_EVENT_DISABLE_TIMING
inline constexpr unsigned kEventInterprocess = 0x4;   // CU_EVENT_INTERPROCESS

struct Driver {
  CUresult (*Init)(unsigned flags);
  CUresult (*DeviceGetCount)(int* count);
  CUresult (*DeviceGet)(CUdevice* device, int ordinal);
  CUresult (*DeviceGetPCIBusId)(char* bus_id, int len, CUdevice device);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice device);
  CUresult (*DevicePrimaryCtxRelease)(CUdevice device);
  CUresult (*CtxPushCurrent)(CUcontext ctx);
  CUresult (*CtxPopCurrent)(CUcontext* ctx);
  CUresult (*CtxSetCurrent)(CUcontext ctx);
  CUresult (*MemAlloc)(CUdeviceptr* ptr, size_t bytes);
  CUresult (*MemFree)(CUdeviceptr ptr);
  CUresult (*IpcGetMemHandle)(CUipcMemHandle* handle, CUdeviceptr ptr);
  CUresult (*EventCreate)(CUevent* event, unsigned flags);
  CUresult (*EventDestroy)(CUevent event);
  CUresult (*EventRecord)(CUevent event, CUstream stream);
  CUresult (*IpcGetEventHandle)(CUipcEventHandle* handle, CUevent event);
  CUresult (*StreamWaitEvent)(CUstream stream, CUevent event, unsigned flags);
  CUresult (*MemcpyAsync)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
  CUresult (*MemcpyHtoD)(CUdeviceptr dst, const void* src, size_t bytes);
  CUresult (*MemcpyDtoH)(void* dst, CUdeviceptr src, size_t bytes);
  CUresult (*MemsetD8)(CUdeviceptr dst, unsigned char value, size_t bytes);
  CUresult (*StreamCreate)(CUstream* stream, unsigned flags);
  CUresult (*StreamDestroy)(CUstream stream);
  CUresult (*StreamSynchronize)(CUstream stream);
  CUresult (*GetErrorString)(CUresult error, const char** text);

  int device_count = 0;  // GPUs the driver sees (at least 1 once loaded)

  // "call: CUDA_ERROR_... text" for a failed driver call.
  Status Error(const char* call, CUresult result) const;
};

// Names the driver library to load instead of libcuda.so.1: the client's host double
// (client/testing/fake_cuda.cc) in tests and the GPU pack's dry run. Read once, at the first load.
inline constexpr char kDriverLibraryEnv[] = "ALLREDUCED_CUDA_DRIVER_LIBRARY";

// The driver, loaded and cuInit'ed once per process. FailedPrecondition "no CUDA driver/device:
// ..." when libcuda.so.1 is missing, lacks an entry point, or cuInit fails (no GPU).
Status LoadDriver(const Driver** out);

}  // namespace ard::client::cuda
