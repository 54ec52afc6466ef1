// The CUDA runtime + NCCL gpu::Device (ARD_WITH_CUDA builds only): memory, CUDA IPC, events,
// streams and copies, and NewCudaDevice. Communicators are in nccl_communicator.cc and
// nccl_collectives.cc. Compiled and linked in CI; exercised only on a GPU host (tests/gpu).
#include "daemon/gpu/cuda_device.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/common/status_macros.h"
#include "daemon/gpu/cuda_device_internal.h"

namespace ard::gpu {
namespace internal {

namespace {

// Errors after which the context is unusable until the process exits (CUDA's "sticky" errors:
// a kernel fault leaves the context corrupted; cudaGetLastError cannot clear them).
bool Sticky(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorAssert:
      return true;
    default:
      return false;
  }
}

// The process's first sticky error: CUDA contexts are per process, so one record serves every
// CudaDevice (there is one per daemon).
ABSL_CONST_INIT absl::Mutex lost_mu(absl::kConstInit);
absl::Status* lost ABSL_GUARDED_BY(lost_mu) = nullptr;

}  // namespace

absl::Status CudaError(cudaError_t err, const char* call, int device) {
  cudaGetLastError();  // clear a non-sticky error so later calls start clean
  absl::Status status =
      absl::InternalError(absl::StrCat(call, " on GPU ", device, ": ", cudaGetErrorString(err)));
  if (!Sticky(err)) return status;
  status = StickyError(std::move(status));
  absl::MutexLock lock(&lost_mu);
  if (lost == nullptr) lost = new absl::Status(status);  // kept until the process exits
  return status;
}

absl::Status CudaDevice::Lost() const {
  absl::MutexLock lock(&lost_mu);
  return lost == nullptr ? absl::OkStatus() : *lost;
}

std::string CudaDevice::Describe() const {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  return absl::StrCat("cuda ", runtime / 1000, ".", (runtime % 1000) / 10, " nccl ", NcclVersion());
}

std::string CudaDevice::NcclVersion() const {
  int nccl = 0;
  ncclGetVersion(&nccl);
  return absl::StrCat(nccl / 10000, ".", (nccl / 100) % 100, ".", nccl % 100);
}

absl::StatusOr<std::unique_ptr<Memory>> CudaDevice::Allocate(int device, size_t bytes) {
  ARD_RETURN_IF_ERROR(CheckDevice(device));
  ARD_CUDA_RETURN(cudaSetDevice(device), device);
  void* data = nullptr;
  ARD_CUDA_RETURN(cudaMalloc(&data, bytes), device);
  return std::unique_ptr<Memory>(new CudaMemory(data, bytes, device, false));
}

absl::StatusOr<std::unique_ptr<Memory>> CudaDevice::AllocateHost(size_t bytes) {
  void* data = nullptr;
  if (cudaError_t err = cudaHostAlloc(&data, bytes, cudaHostAllocPortable); err != cudaSuccess) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("cudaHostAlloc of ", bytes, " bytes: ", cudaGetErrorString(err)));
  }
  return std::unique_ptr<Memory>(new CudaHostMemory(data, bytes));
}

absl::Status CudaDevice::InitContexts() {
  for (int device = 0; device < count_; ++device) {
    ARD_CUDA_RETURN(cudaInitDevice(device, 0, 0), device);
  }
  return absl::OkStatus();
}

absl::StatusOr<IpcHandle> CudaDevice::ExportMemory(const Memory& memory) {
  cudaIpcMemHandle_t h;
  ARD_CUDA_RETURN(cudaSetDevice(memory.device()), memory.device());
  ARD_CUDA_RETURN(cudaIpcGetMemHandle(&h, memory.data()), memory.device());
  IpcHandle out;
  static_assert(sizeof(h) == kIpcHandleBytes, "cudaIpcMemHandle_t size");
  std::memcpy(out.data(), &h, sizeof(h));
  return out;
}

absl::StatusOr<std::unique_ptr<Memory>> CudaDevice::OpenMemory(int device,
                                                               const IpcHandle& handle) {
  ARD_RETURN_IF_ERROR(CheckDevice(device));
  ARD_CUDA_RETURN(cudaSetDevice(device), device);
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* data = nullptr;
  cudaError_t err = cudaIpcOpenMemHandle(&data, h, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::InvalidArgumentError(
        absl::StrCat("cudaIpcOpenMemHandle on GPU ", device, ": ", cudaGetErrorString(err),
                     " (stale handle, or memory this process does not own)"));
  }
  size_t size = 0;
  std::call_once(range_once_, [this] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                         &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess) {
      get_range_ = reinterpret_cast<GetRangeFn>(fn);
    }
  });
  if (get_range_ != nullptr) {
    CUdeviceptr base = 0;
    if (get_range_(&base, &size, reinterpret_cast<CUdeviceptr>(data)) != CUDA_SUCCESS) size = 0;
  }
  if (size == 0) {
    cudaIpcCloseMemHandle(data);
    return absl::InternalError("cuMemGetAddressRange failed for an opened IPC mapping");
  }
  return std::unique_ptr<Memory>(new CudaMemory(data, size, device, true));
}

absl::StatusOr<std::unique_ptr<Event>> CudaDevice::CreateEvent(int device, bool interprocess) {
  ARD_RETURN_IF_ERROR(CheckDevice(device));
  ARD_CUDA_RETURN(cudaSetDevice(device), device);
  cudaEvent_t event;
  unsigned flags = cudaEventDisableTiming | (interprocess ? cudaEventInterprocess : 0);
  ARD_CUDA_RETURN(cudaEventCreateWithFlags(&event, flags), device);
  return std::unique_ptr<Event>(new CudaEvent(event, device));
}

absl::StatusOr<IpcHandle> CudaDevice::ExportEvent(const Event& event) {
  cudaIpcEventHandle_t h;
  ARD_CUDA_RETURN(cudaIpcGetEventHandle(&h, static_cast<const CudaEvent&>(event).get()),
                  event.device());
  IpcHandle out;
  static_assert(sizeof(h) == kIpcHandleBytes, "cudaIpcEventHandle_t size");
  std::memcpy(out.data(), &h, sizeof(h));
  return out;
}

absl::StatusOr<std::unique_ptr<Event>> CudaDevice::OpenEvent(int device, const IpcHandle& handle) {
  ARD_RETURN_IF_ERROR(CheckDevice(device));
  ARD_CUDA_RETURN(cudaSetDevice(device), device);
  cudaIpcEventHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  cudaEvent_t event;
  cudaError_t err = cudaIpcOpenEventHandle(&event, h);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::InvalidArgumentError(
        absl::StrCat("cudaIpcOpenEventHandle on GPU ", device, ": ", cudaGetErrorString(err)));
  }
  return std::unique_ptr<Event>(new CudaEvent(event, device));
}

absl::StatusOr<std::unique_ptr<Stream>> CudaDevice::CreateStream(int device) {
  ARD_RETURN_IF_ERROR(CheckDevice(device));
  ARD_CUDA_RETURN(cudaSetDevice(device), device);
  cudaStream_t stream;
  ARD_CUDA_RETURN(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), device);
  return std::unique_ptr<Stream>(new CudaStream(stream, device));
}

absl::Status CudaDevice::Record(Event& event, Stream& stream) {
  ARD_CUDA_RETURN(cudaSetDevice(stream.device()), stream.device());
  ARD_CUDA_RETURN(cudaEventRecord(static_cast<CudaEvent&>(event).get(), StreamOf(stream)),
                  stream.device());
  return absl::OkStatus();
}

absl::Status CudaDevice::Wait(Stream& stream, Event& event) {
  ARD_CUDA_RETURN(cudaSetDevice(stream.device()), stream.device());
  ARD_CUDA_RETURN(cudaStreamWaitEvent(StreamOf(stream), static_cast<CudaEvent&>(event).get(), 0),
                  stream.device());
  return absl::OkStatus();
}

absl::Status CudaDevice::CopyAsync(void* dst, const void* src, size_t bytes, Stream& stream) {
  ARD_CUDA_RETURN(cudaSetDevice(stream.device()), stream.device());
  ARD_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, StreamOf(stream)),
                  stream.device());
  return absl::OkStatus();
}

absl::Status CudaDevice::MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) {
  ARD_CUDA_RETURN(cudaSetDevice(stream.device()), stream.device());
  ARD_CUDA_RETURN(cudaMemsetAsync(dst, value, bytes, StreamOf(stream)), stream.device());
  return absl::OkStatus();
}

absl::Status CudaDevice::Synchronize(Stream& stream) {
  ARD_CUDA_RETURN(cudaSetDevice(stream.device()), stream.device());
  ARD_CUDA_RETURN(cudaStreamSynchronize(StreamOf(stream)), stream.device());
  return absl::OkStatus();
}

absl::StatusOr<bool> CudaDevice::Query(Stream& stream) {
  cudaError_t err = cudaStreamQuery(StreamOf(stream));
  if (err == cudaErrorNotReady) return false;
  ARD_CUDA_RETURN(err, stream.device());
  return true;
}

absl::Status CudaDevice::CheckDevice(int device) const {
  if (device < 0 || device >= count_) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid device ordinal ", device, " (", count_, " GPUs)"));
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<Device>> NewCudaDevice() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA driver/device: cudaGetDeviceCount: ", cudaGetErrorString(err)));
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device");
  return std::unique_ptr<Device>(new internal::CudaDevice(count));
}

}  // namespace ard::gpu
