// Where each tensor of a fused GPU collective lies in a device's fusion buffer, and which
// contiguous runs can go to the communicator as one call (same dtype and reduce op). Pure value
// computation; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "proto/local_wire.h"

namespace ard::gpu {

// Offsets are aligned to this many bytes (NCCL and copy engines prefer aligned buffers).
inline constexpr size_t kFusionAlignBytes = 256;

struct FusionTensor {
  wire::DataType dtype = wire::DataType::kFloat32;
  wire::ReduceOp op = wire::ReduceOp::kSum;
  size_t count = 0;  // elements
};

// One communicator call over [offset, offset + count * element size) of the fusion buffer.
struct FusionRun {
  size_t offset = 0;
  size_t count = 0;
  wire::DataType dtype = wire::DataType::kFloat32;
  wire::ReduceOp op = wire::ReduceOp::kSum;
};

struct FusionLayout {
  std::vector<size_t> offsets;  // per tensor, in bytes
  std::vector<FusionRun> runs;  // in buffer order
  size_t total_bytes = 0;
};

// Tensors are laid out in the given order. A tensor starts a new run (at an aligned offset) when
// its dtype or op differs from the previous one; within a run tensors are packed back to back
// (each still starts at a multiple of its element size), so a run is one dense array.
FusionLayout PlanFusion(const std::vector<FusionTensor>& tensors);

}  // namespace ard::gpu
