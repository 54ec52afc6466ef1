#include "client/gpu_staging.h"

#include <cstring>

namespace ard::client {
namespace {

// Makes `ctx` current for a scope (the framework may have another one current).
class ScopedContext {
 public:
  ScopedContext(const cuda::Driver& d, cuda::CUcontext ctx) : d_(d) {
    ok_ = d_.CtxPushCurrent(ctx) == cuda::kSuccess;
  }
  ~ScopedContext() {
    cuda::CUcontext popped;
    if (ok_) d_.CtxPopCurrent(&popped);
  }
  bool ok() const { return ok_; }

 private:
  const cuda::Driver& d_;
  bool ok_ = false;
};

}  // namespace

Status GpuStaging::Create(int device, uint64_t arena_bytes, uint32_t num_events,
                          std::unique_ptr<GpuStaging>* out) {
  if (arena_bytes == 0 || num_events == 0 || num_events > wire::kMaxGpuEvents) {
    return InvalidArgument("GPU staging: arena_bytes > 0 and 1..1024 events");
  }
  const cuda::Driver* d = nullptr;
  ARD_CLIENT_RETURN_IF_ERROR(cuda::LoadDriver(&d));
  std::unique_ptr<GpuStaging> s(new GpuStaging());
  s->driver_ = d;
  s->device_ = device;
  cuda::CUresult r = d->DeviceGet(&s->cu_device_, device);
  if (r != cuda::kSuccess) {
    return {wire::Code::kFailedPrecondition, "no CUDA driver/device: GPU " +
                                                 std::to_string(device) + ": " +
                                                 d->Error("cuDeviceGet", r).message()};
  }
  if ((r = d->DevicePrimaryCtxRetain(&s->context_, s->cu_device_)) != cuda::kSuccess) {
    s->context_ = nullptr;
    return d->Error("cuDevicePrimaryCtxRetain", r);
  }
  ScopedContext ctx(*d, s->context_);
  if (!ctx.ok()) return Internal("cuCtxPushCurrent failed");
  if ((r = d->MemAlloc(&s->arena_, arena_bytes)) != cuda::kSuccess) {
    s->arena_ = 0;
    return d->Error("cuMemAlloc (GPU staging arena)", r);
  }
  s->arena_bytes_ = arena_bytes;
  wire::GpuRegister reg{};
  reg.device = device;
  reg.num_events = num_events;
  reg.arena_bytes = arena_bytes;
  cuda::CUipcMemHandle mem;
  if ((r = d->IpcGetMemHandle(&mem, s->arena_)) != cuda::kSuccess) {
    return d->Error("cuIpcGetMemHandle", r);
  }
  std::memcpy(reg.arena_handle, &mem, sizeof(mem));
  d->DeviceGetPCIBusId(reg.pci_bus_id, sizeof(reg.pci_bus_id), s->cu_device_);
  s->payload_.assign(reinterpret_cast<const char*>(&reg), sizeof(reg));
  for (uint32_t i = 0; i < num_events; ++i) {
    cuda::CUevent e = nullptr;
    r = d->EventCreate(&e, cuda::kEventInterprocess | cuda::kEventDisableTiming);
    if (r != cuda::kSuccess) return d->Error("cuEventCreate (interprocess)", r);
    s->events_.push_back(e);
    cuda::CUipcEventHandle h;
    if ((r = d->IpcGetEventHandle(&h, e)) != cuda::kSuccess) {
      return d->Error("cuIpcGetEventHandle", r);
    }
    s->payload_.append(reinterpret_cast<const char*>(&h), sizeof(h));
  }
  *out = std::move(s);
  return OkStatus();
}

GpuStaging::~GpuStaging() {
  if (driver_ == nullptr || context_ == nullptr) return;
  {
    ScopedContext ctx(*driver_, context_);
    for (cuda::CUevent e : events_) driver_->EventDestroy(e);
    if (arena_ != 0) driver_->MemFree(arena_);
  }
  driver_->DevicePrimaryCtxRelease(cu_device_);
}

Status GpuStaging::Check(uint64_t offset, size_t bytes, uint32_t event) const {
  if (event >= events_.size()) return InvalidArgument("GPU staging: event index out of range");
  if (offset > arena_bytes_ || bytes > arena_bytes_ - offset) {
    return InvalidArgument("GPU staging: tensor outside the staging arena");
  }
  return OkStatus();
}

Status GpuStaging::CopyIn(uint64_t offset, const void* src, size_t bytes, uint32_t event,
                          void* stream) {
  ARD_CLIENT_RETURN_IF_ERROR(Check(offset, bytes, event));
  ScopedContext ctx(*driver_, context_);
  auto s = static_cast<cuda::CUstream>(stream);
  cuda::CUresult r = cuda::kSuccess;
  if (bytes > 0) {
    r = driver_->MemcpyAsync(arena_ + offset, reinterpret_cast<cuda::CUdeviceptr>(src), bytes, s);
    if (r != cuda::kSuccess) return driver_->Error("cuMemcpyAsync (into staging)", r);
  }
  if ((r = driver_->EventRecord(events_[event], s)) != cuda::kSuccess) {
    return driver_->Error("cuEventRecord", r);
  }
  return OkStatus();
}

Status GpuStaging::CopyOut(uint64_t offset, void* dst, size_t bytes, uint32_t event, void* stream) {
  ARD_CLIENT_RETURN_IF_ERROR(Check(offset, bytes, event));
  ScopedContext ctx(*driver_, context_);
  auto s = static_cast<cuda::CUstream>(stream);
  cuda::CUresult r = driver_->StreamWaitEvent(s, events_[event], 0);
  if (r != cuda::kSuccess) return driver_->Error("cuStreamWaitEvent", r);
  if (bytes == 0) return OkStatus();
  r = driver_->MemcpyAsync(reinterpret_cast<cuda::CUdeviceptr>(dst), arena_ + offset, bytes, s);
  if (r != cuda::kSuccess) return driver_->Error("cuMemcpyAsync (out of staging)", r);
  return OkStatus();
}

}  // namespace ard::client
