#include "client/cuda_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace ard::client::cuda {
namespace {

Status FailedPrecondition(std::string m) {
  return {wire::Code::kFailedPrecondition, "no CUDA driver/device: " + std::move(m)};
}

struct Loaded {
  Driver driver{};
  Status status;
};

template <typename Fn>
bool Bind(void* lib, const char* name, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*out == nullptr && missing->empty()) *missing = name;
  return *out != nullptr;
}

Loaded Load() {
  Loaded l;
  // Kept open for the life of the process (the driver cannot be unloaded safely).
  const char* path = std::getenv(kDriverLibraryEnv);
  if (path == nullptr || *path == '\0') path = "libcuda.so.1";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    l.status = FailedPrecondition("dlopen(" + std::string(path) + "): " + (why ? why : "?"));
    return l;
  }
  Driver& d = l.driver;
  std::string missing;
  // Versioned names are the ones cuda.h maps the plain names to (the ABI this code declares).
  Bind(lib, "cuInit", &d.Init, &missing);
  Bind(lib, "cuDeviceGetCount", &d.DeviceGetCount, &missing);
  Bind(lib, "cuDeviceGet", &d.DeviceGet, &missing);
  Bind(lib, "cuDeviceGetPCIBusId", &d.DeviceGetPCIBusId, &missing);
  Bind(lib, "cuDevicePrimaryCtxRetain", &d.DevicePrimaryCtxRetain, &missing);
  Bind(lib, "cuDevicePrimaryCtxRelease_v2", &d.DevicePrimaryCtxRelease, &missing);
  Bind(lib, "cuCtxPushCurrent_v2", &d.CtxPushCurrent, &missing);
  Bind(lib, "cuCtxPopCurrent_v2", &d.CtxPopCurrent, &missing);
  Bind(lib, "cuCtxSetCurrent", &d.CtxSetCurrent, &missing);
  Bind(lib, "cuMemAlloc_v2", &d.MemAlloc, &missing);
  Bind(lib, "cuMemFree_v2", &d.MemFree, &missing);
  Bind(lib, "cuIpcGetMemHandle", &d.IpcGetMemHandle, &missing);
  Bind(lib, "cuEventCreate", &d.EventCreate, &missing);
  Bind(lib, "cuEventDestroy_v2", &d.EventDestroy, &missing);
  Bind(lib, "cuEventRecord", &d.EventRecord, &missing);
  Bind(lib, "cuIpcGetEventHandle", &d.IpcGetEventHandle, &missing);
  Bind(lib, "cuStreamWaitEvent", &d.StreamWaitEvent, &missing);
  Bind(lib, "cuMemcpyAsync", &d.MemcpyAsync, &missing);
  Bind(lib, "cuMemcpyHtoD_v2", &d.MemcpyHtoD, &missing);
  Bind(lib, "cuMemcpyDtoH_v2", &d.MemcpyDtoH, &missing);
  Bind(lib, "cuMemsetD8_v2", &d.MemsetD8, &missing);
  Bind(lib, "cuStreamCreate", &d.StreamCreate, &missing);
  Bind(lib, "cuStreamDestroy_v2", &d.StreamDestroy, &missing);
  Bind(lib, "cuStreamSynchronize", &d.StreamSynchronize, &missing);
  Bind(lib, "cuGetErrorString", &d.GetErrorString, &missing);
  if (!missing.empty()) {
    l.status = FailedPrecondition(std::string(path) + " has no " + missing + " (driver too old?)");
    return l;
  }
  CUresult r = d.Init(0);
  if (r != kSuccess) {
    l.status = FailedPrecondition(d.Error("cuInit", r).message());
    return l;
  }
  int& count = d.device_count;
  r = d.DeviceGetCount(&count);
  if (r != kSuccess || count == 0) {
    l.status = FailedPrecondition(r != kSuccess ? d.Error("cuDeviceGetCount", r).message()
                                                : std::string("the driver sees no GPU"));
  }
  return l;
}

}  // namespace

Status Driver::Error(const char* call, CUresult result) const {
  const char* text = nullptr;
  if (GetErrorString == nullptr || GetErrorString(result, &text) != kSuccess || text == nullptr) {
    text = "unknown CUDA error";
  }
  return Internal(std::string(call) + ": " + text + " (" + std::to_string(result) + ")");
}

Status LoadDriver(const Driver** out) {
  static std::once_flag once;
  static Loaded* loaded = nullptr;  // leaked on purpose: lives as long as the process
  std::call_once(once, [] { loaded = new Loaded(Load()); });
  if (!loaded->status.ok()) return loaded->status;
  *out = &loaded->driver;
  return OkStatus();
}

}  // namespace ard::client::cuda
