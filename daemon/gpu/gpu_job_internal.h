// Small helpers GpuJob's source files share (gpu_job.cc, gpu_job_steps.cc,
// gpu_job_collectives.cc). Not part of GpuJob's interface.
#pragma once

#include <cstddef>
#include <cstdint>

#include "daemon/gpu/gpu_job.h"

namespace ard::gpu::internal {

inline size_t Bytes(const FusionTensor& t) {
  return t.count * wire::DataTypeSize(static_cast<uint32_t>(t.dtype));
}

inline char* At(const Memory& m, uint64_t offset) { return static_cast<char*>(m.data()) + offset; }

// The input of job rank `rank` among a tensor's inputs; null when that rank has none here.
inline const GpuTensorInput* InputOf(const GpuTensor& t, int rank) {
  for (const GpuTensorInput& in : t.inputs) {
    if (in.rank == rank) return &in;
  }
  return nullptr;
}

}  // namespace ard::gpu::internal
