// What this host's GPUs and NCCL are, for the cluster view. Built with CUDA (ARD_WITH_CUDA) it asks
// the CUDA runtime and NCCL; a host without a driver or GPU reports none. Built without CUDA it
// reports none and empty versions. Call once at startup (any thread).
#pragma once

#include "proto/common.pb.h"

namespace ard::gpu {

// Fills gpus, nccl_version and cuda_runtime_version of `info`.
void DescribeDevices(HostInfo* info);

}  // namespace ard::gpu
