#include "ctl/bench_cuda.h"

#include <mutex>

namespace ard::ctl {
namespace {

// CU_STREAM_DEFAULT: a blocking stream, ordered after the legacy default stream on which the
// synchronous cuMemcpyHtoD/cuMemsetD8 of Prepare run (a pageable cuMemcpyHtoD may return before
// its DMA finished).
constexpr unsigned kStreamBlocking = 0x0;

absl::Status ToAbsl(const client::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.raw_code()), s.message());
}

}  // namespace

absl::Status BenchCuda::Check(const char* call, CUresult result) const {
  if (result == client::cuda::kSuccess) return absl::OkStatus();
  return ToAbsl(d->Error(call, result));
}

absl::Status LoadBenchCuda(const BenchCuda** out) {
  struct Loaded {
    BenchCuda cuda;
    absl::Status status;
  };
  static std::once_flag once;
  static Loaded* loaded = nullptr;  // leaked on purpose: lives as long as the process
  std::call_once(once, [] {
    loaded = new Loaded;
    const client::cuda::Driver* driver = nullptr;
    loaded->status = ToAbsl(client::cuda::LoadDriver(&driver));
    if (loaded->status.ok()) loaded->cuda = BenchCuda{driver, driver->device_count};
  });
  if (!loaded->status.ok()) return loaded->status;
  *out = &loaded->cuda;
  return absl::OkStatus();
}

BenchGpuMemory::~BenchGpuMemory() {
  if (cuda_ == nullptr) return;
  if (ctx_ != nullptr) cuda_->d->CtxSetCurrent(ctx_);
  FreeBuffers();
  if (stream_ != nullptr) cuda_->d->StreamDestroy(stream_);
  if (ctx_ != nullptr) cuda_->d->DevicePrimaryCtxRelease(device_);
}

absl::Status BenchGpuMemory::Init(const BenchCuda* cuda, int device) {
  cuda_ = cuda;
  int handle = 0;
  absl::Status st = cuda->Check("cuDeviceGet", cuda->d->DeviceGet(&handle, device));
  if (!st.ok()) return st;
  st = cuda->Check("cuDevicePrimaryCtxRetain", cuda->d->DevicePrimaryCtxRetain(&ctx_, handle));
  if (!st.ok()) return st;
  device_ = handle;
  st = cuda->Check("cuCtxSetCurrent", cuda->d->CtxSetCurrent(ctx_));
  if (!st.ok()) return st;
  return cuda->Check("cuStreamCreate", cuda->d->StreamCreate(&stream_, kStreamBlocking));
}

absl::Status BenchGpuMemory::Activate() const {
  return cuda_->Check("cuCtxSetCurrent", cuda_->d->CtxSetCurrent(ctx_));
}

void BenchGpuMemory::FreeBuffers() {
  if (input_ != 0) cuda_->d->MemFree(input_);
  if (output_ != 0) cuda_->d->MemFree(output_);
  input_ = output_ = 0;
}

absl::Status BenchGpuMemory::Prepare(const void* input, size_t input_bytes, size_t output_bytes) {
  FreeBuffers();
  absl::Status st = cuda_->Check("cuMemAlloc", cuda_->d->MemAlloc(&input_, input_bytes + 1));
  if (st.ok()) st = cuda_->Check("cuMemAlloc", cuda_->d->MemAlloc(&output_, output_bytes + 1));
  if (st.ok() && input_bytes > 0) {
    st = cuda_->Check("cuMemcpyHtoD", cuda_->d->MemcpyHtoD(input_, input, input_bytes));
  }
  if (st.ok()) st = cuda_->Check("cuMemsetD8", cuda_->d->MemsetD8(output_, 0, output_bytes + 1));
  return st;
}

absl::Status BenchGpuMemory::Synchronize() const {
  return cuda_->Check("cuStreamSynchronize", cuda_->d->StreamSynchronize(stream_));
}

absl::Status BenchGpuMemory::CopyOut(void* host, size_t bytes) const {
  if (bytes == 0) return absl::OkStatus();
  return cuda_->Check("cuMemcpyDtoH", cuda_->d->MemcpyDtoH(host, output_, bytes));
}

}  // namespace ard::ctl
