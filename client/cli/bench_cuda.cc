#include "client/cli/bench_cuda.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"

namespace ard::cli {
namespace {

// CU_STREAM_DEFAULT: a blocking stream, ordered after the legacy default stream on which the
// synchronous cuMemcpyHtoD/cuMemsetD8 of Prepare run (a pageable cuMemcpyHtoD may return before
// its DMA finished).
constexpr unsigned kStreamBlocking = 0x0;

absl::Status NoDevice(const std::string& why) {
  return absl::FailedPreconditionError("no CUDA driver/device: " + why);
}

struct Loaded {
  BenchCuda cuda{};
  absl::Status status;
};

template <typename Fn>
void Bind(void* lib, const char* name, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*out == nullptr && missing->empty()) *missing = name;
}

Loaded Load() {
  Loaded l;
  // Kept open for the life of the process (the driver cannot be unloaded safely).
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = dlerror();
    l.status = NoDevice(absl::StrCat("dlopen(libcuda.so.1): ", why != nullptr ? why : "?"));
    return l;
  }
  BenchCuda& c = l.cuda;
  std::string missing;
  // The versioned names are those cuda.h maps the plain names to (the ABI declared here).
  Bind(lib, "cuInit", &c.Init, &missing);
  Bind(lib, "cuDeviceGetCount", &c.DeviceGetCount, &missing);
  Bind(lib, "cuDeviceGet", &c.DeviceGet, &missing);
  Bind(lib, "cuDeviceGetName", &c.DeviceGetName, &missing);
  Bind(lib, "cuDevicePrimaryCtxRetain", &c.DevicePrimaryCtxRetain, &missing);
  Bind(lib, "cuDevicePrimaryCtxRelease_v2", &c.DevicePrimaryCtxRelease, &missing);
  Bind(lib, "cuCtxSetCurrent", &c.CtxSetCurrent, &missing);
  Bind(lib, "cuMemAlloc_v2", &c.MemAlloc, &missing);
  Bind(lib, "cuMemFree_v2", &c.MemFree, &missing);
  Bind(lib, "cuMemcpyHtoD_v2", &c.MemcpyHtoD, &missing);
  Bind(lib, "cuMemcpyDtoH_v2", &c.MemcpyDtoH, &missing);
  Bind(lib, "cuMemsetD8_v2", &c.MemsetD8, &missing);
  Bind(lib, "cuStreamCreate", &c.StreamCreate, &missing);
  Bind(lib, "cuStreamDestroy_v2", &c.StreamDestroy, &missing);
  Bind(lib, "cuStreamSynchronize", &c.StreamSynchronize, &missing);
  Bind(lib, "cuGetErrorString", &c.GetErrorString, &missing);
  if (!missing.empty()) {
    l.status = NoDevice(absl::StrCat("libcuda.so.1 has no ", missing, " (driver too old?)"));
    return l;
  }
  absl::Status st = c.Check("cuInit", c.Init(0));
  if (st.ok()) st = c.Check("cuDeviceGetCount", c.DeviceGetCount(&c.device_count));
  if (!st.ok()) {
    l.status = NoDevice(std::string(st.message()));
  } else if (c.device_count <= 0) {
    l.status = NoDevice("the driver sees no GPU");
  }
  return l;
}

}  // namespace

absl::Status BenchCuda::Check(const char* call, CUresult result) const {
  if (result == 0) return absl::OkStatus();
  const char* text = nullptr;
  if (GetErrorString == nullptr || GetErrorString(result, &text) != 0 || text == nullptr) {
    text = "unknown CUDA error";
  }
  return absl::InternalError(absl::StrCat(call, ": ", text, " (", result, ")"));
}

absl::Status LoadBenchCuda(const BenchCuda** out) {
  static std::once_flag once;
  static Loaded* loaded = nullptr;  // leaked on purpose: lives as long as the process
  std::call_once(once, [] { loaded = new Loaded(Load()); });
  if (!loaded->status.ok()) return loaded->status;
  *out = &loaded->cuda;
  return absl::OkStatus();
}

BenchGpuMemory::~BenchGpuMemory() {
  if (cuda_ == nullptr) return;
  if (ctx_ != nullptr) cuda_->CtxSetCurrent(ctx_);
  FreeBuffers();
  if (stream_ != nullptr) cuda_->StreamDestroy(stream_);
  if (ctx_ != nullptr) cuda_->DevicePrimaryCtxRelease(device_);
}

absl::Status BenchGpuMemory::Init(const BenchCuda* cuda, int device) {
  cuda_ = cuda;
  int handle = 0;
  absl::Status st = cuda->Check("cuDeviceGet", cuda->DeviceGet(&handle, device));
  if (!st.ok()) return st;
  st = cuda->Check("cuDevicePrimaryCtxRetain", cuda->DevicePrimaryCtxRetain(&ctx_, handle));
  if (!st.ok()) return st;
  device_ = handle;
  st = cuda->Check("cuCtxSetCurrent", cuda->CtxSetCurrent(ctx_));
  if (!st.ok()) return st;
  return cuda->Check("cuStreamCreate", cuda->StreamCreate(&stream_, kStreamBlocking));
}

absl::Status BenchGpuMemory::Activate() const {
  return cuda_->Check("cuCtxSetCurrent", cuda_->CtxSetCurrent(ctx_));
}

void BenchGpuMemory::FreeBuffers() {
  if (input_ != 0) cuda_->MemFree(input_);
  if (output_ != 0) cuda_->MemFree(output_);
  input_ = output_ = 0;
}

absl::Status BenchGpuMemory::Prepare(const void* input, size_t input_bytes, size_t output_bytes) {
  FreeBuffers();
  absl::Status st = cuda_->Check("cuMemAlloc", cuda_->MemAlloc(&input_, input_bytes + 1));
  if (st.ok()) st = cuda_->Check("cuMemAlloc", cuda_->MemAlloc(&output_, output_bytes + 1));
  if (st.ok() && input_bytes > 0) {
    st = cuda_->Check("cuMemcpyHtoD", cuda_->MemcpyHtoD(input_, input, input_bytes));
  }
  if (st.ok()) st = cuda_->Check("cuMemsetD8", cuda_->MemsetD8(output_, 0, output_bytes + 1));
  return st;
}

absl::Status BenchGpuMemory::Synchronize() const {
  return cuda_->Check("cuStreamSynchronize", cuda_->StreamSynchronize(stream_));
}

absl::Status BenchGpuMemory::CopyOut(void* host, size_t bytes) const {
  if (bytes == 0) return absl::OkStatus();
  return cuda_->Check("cuMemcpyDtoH", cuda_->MemcpyDtoH(host, output_, bytes));
}

}  // namespace ard::cli
