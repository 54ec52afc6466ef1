#include "daemon/gpu/device_query.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

#ifdef ARD_WITH_CUDA
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace ard::gpu {

void DescribeDevices(HostInfo* info) {
#ifdef ARD_WITH_CUDA
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) {
    info->set_cuda_runtime_version(absl::StrCat(runtime / 1000, ".", (runtime % 1000) / 10));
  }
  int nccl = 0;
  if (ncclGetVersion(&nccl) == ncclSuccess) {
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    info->set_nccl_version(absl::StrCat(nccl / 10000, ".", (nccl / 100) % 100, ".", nccl % 100));
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear the sticky error, report none
    return;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    GpuInfo* gpu = info->add_gpus();
    gpu->set_index(i);
    gpu->set_model(prop.name);
    gpu->set_memory_bytes(prop.totalGlobalMem);
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), i) == cudaSuccess) gpu->set_pci_bus_id(bus);
  }
#else
  (void)info;
#endif
}

std::vector<std::string> PciBusIds(const HostInfo& info) {
  std::vector<std::string> ids;
  for (const GpuInfo& g : info.gpus()) {
    if (g.index() >= ids.size()) ids.resize(g.index() + 1);
    ids[g.index()] = g.pci_bus_id();
  }
  return ids;
}

std::vector<std::string> PhysicalIds(const HostInfo& info) {
  std::vector<std::string> ids;
  if (info.gpus().empty()) return ids;
  std::string machine;
  for (const char* path : {"/etc/machine-id", "/proc/sys/kernel/random/boot_id"}) {
    std::ifstream in(path);
    if (std::getline(in, machine) && !absl::StripAsciiWhitespace(machine).empty()) break;
    machine.clear();
  }
  machine = std::string(absl::StripAsciiWhitespace(machine));
  for (const GpuInfo& g : info.gpus()) {
    if (g.index() >= ids.size()) ids.resize(g.index() + 1);
    if (!machine.empty() && !g.pci_bus_id().empty()) {
      ids[g.index()] = absl::StrCat(machine, "/", g.pci_bus_id());
    }
  }
  return ids;
}

}  // namespace ard::gpu
