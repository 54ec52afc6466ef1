#include "daemon/gpu/gpu_plan.h"

#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"

namespace ard::gpu {

absl::StatusOr<GpuPlan> PlanGpuJob(const std::string& setting, const std::vector<HostGpus>& hosts,
                                   int cross_rank) {
  if (cross_rank < 0 || cross_rank >= static_cast<int>(hosts.size())) {
    return absl::InvalidArgumentError("cross rank out of range");
  }
  std::vector<std::set<int>> devices(hosts.size());
  bool same_nccl = true;
  for (size_t h = 0; h < hosts.size(); ++h) {
    if (hosts[h].nccl_version.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("host ", hosts[h].host, " has no NCCL (built without CUDA?)"));
    }
    same_nccl = same_nccl && hosts[h].nccl_version == hosts[0].nccl_version;
    for (int d : hosts[h].rank_devices) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("a rank on host ", hosts[h].host, " has no GPU"));
      }
      devices[h].insert(d);
    }
  }
  GpuPlan plan;
  if (setting == "hierarchical") {
    plan.mode = GpuMode::kHierarchical;
    plan.reason = "gpu_mode=hierarchical";
  } else if (hosts.size() == 1) {
    plan.mode = GpuMode::kNccl;
    plan.reason = "single host";
  } else if (same_nccl) {
    plan.mode = GpuMode::kNccl;
    plan.reason = absl::StrCat("NCCL ", hosts[0].nccl_version, " on every host");
  } else if (setting == "nccl") {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu_mode=nccl, but NCCL cannot span the job's hosts: ", hosts[0].host,
                     " runs ", hosts[0].nccl_version, " and another host a different version"));
  } else {
    plan.mode = GpuMode::kHierarchical;
    plan.reason = "hosts run different NCCL versions, so NCCL cannot span them";
  }
  if (plan.mode == GpuMode::kHierarchical) {
    for (int d : devices[cross_rank]) {
      plan.local_comm_ranks.push_back(CommRank{plan.comm_size++, d});
    }
    return plan;
  }
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (int d : devices[h]) {
      if (static_cast<int>(h) == cross_rank) {
        plan.local_comm_ranks.push_back(CommRank{plan.comm_size, d});
      }
      ++plan.comm_size;
    }
  }
  return plan;
}

std::vector<HostGpus> HostGpusFromLayout(const JobLayout& layout) {
  std::vector<HostGpus> hosts;
  for (const auto& h : layout.hosts()) {
    hosts.push_back(HostGpus{h.name(), h.nccl_version(),
                             std::vector<int>(h.gpu_devices().begin(), h.gpu_devices().end())});
  }
  return hosts;
}

absl::StatusOr<UniqueId> UniqueIdFromLayout(const JobLayout& layout) {
  if (layout.nccl_unique_id().size() != kUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("job layout carries a ",
                                                   layout.nccl_unique_id().size(),
                                                   "-byte NCCL id, not ", kUniqueIdBytes));
  }
  UniqueId id;
  std::memcpy(id.data(), layout.nccl_unique_id().data(), kUniqueIdBytes);
  return id;
}

}  // namespace ard::gpu
