// The client's half of the GPU path (DESIGN.md "GPU path"; wire: local_wire.h "GPU path"): per
// process and device, a device staging arena (cuMemAlloc) and a pool of interprocess events, whose
// IPC handles go to the daemon once in GPU_REGISTER. Per tensor: CopyIn on the framework's stream
// (copy into the arena, record the pool event), then, on COMPLETE, CopyOut (the stream waits on
// the event the daemon recorded, then copies the result out). Nothing here blocks the host.
//
// Lifecycle: 1. Create (loads the driver; FailedPrecondition "no CUDA driver/device" without one);
// 2. RegisterPayload -> GPU_REGISTER; 3. CopyIn/CopyOut from any thread (calls are independent;
// the caller keeps each event index in use by one tensor at a time); 4. destroyed after the daemon
// is told BYE (frees the arena and events).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/cuda_driver.h"
#include "client/status.h"

namespace ard::client {

class GpuStaging {
 public:
  static Status Create(int device, uint64_t arena_bytes, uint32_t num_events,
                       std::unique_ptr<GpuStaging>* out);
  ~GpuStaging();
  GpuStaging(const GpuStaging&) = delete;
  GpuStaging& operator=(const GpuStaging&) = delete;

  // GPU_REGISTER's payload: wire::GpuRegister then the event handles.
  const std::string& RegisterPayload() const { return payload_; }
  int device() const { return device_; }
  uint64_t arena_bytes() const { return arena_bytes_; }
  uint32_t num_events() const { return static_cast<uint32_t>(events_.size()); }

  // `stream` is the framework's CUstream (e.g. TF's Eigen GPU device stream), passed as void*.
  // CopyIn with 0 bytes only records the event (an input the daemon never reads); CopyOut with 0
  // bytes only makes the stream wait for the daemon (so the range may be reused after it).
  Status CopyIn(uint64_t offset, const void* src, size_t bytes, uint32_t event, void* stream);
  Status CopyOut(uint64_t offset, void* dst, size_t bytes, uint32_t event, void* stream);

 private:
  GpuStaging() = default;
  Status Check(uint64_t offset, size_t bytes, uint32_t event) const;

  const cuda::Driver* driver_ = nullptr;  // Not owned (process lifetime).
  int device_ = 0;
  cuda::CUdevice cu_device_ = 0;
  cuda::CUcontext context_ = nullptr;  // retained primary context
  cuda::CUdeviceptr arena_ = 0;
  uint64_t arena_bytes_ = 0;
  std::vector<cuda::CUevent> events_;
  std::string payload_;
};

}  // namespace ard::client
