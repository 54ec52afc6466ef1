// What this host's GPUs and NCCL are, for the cluster view. Built with CUDA (ARD_WITH_CUDA) it asks
// the CUDA runtime and NCCL; a host without a driver or GPU reports none. Built without CUDA it
// reports none and empty versions. Call once at startup (any thread).
#pragma once

#include <string>
#include <vector>

#include "proto/common.pb.h"

namespace ard::gpu {

// Fills gpus, nccl_version and cuda_runtime_version of `info`.
void DescribeDevices(HostInfo* info);

// Each GPU's physical identity, "<machine id>/<PCI bus id>" (index = ordinal), from `info`'s GPUs
// and /etc/machine-id (the kernel's boot id when absent): two daemons on one machine see the same
// ids for the GPUs they share. Empty when `info` lists no GPUs.
std::vector<std::string> PhysicalIds(const HostInfo& info);
// Each GPU's PCI bus id (index = ordinal), from `info`.
std::vector<std::string> PciBusIds(const HostInfo& info);

}  // namespace ard::gpu
