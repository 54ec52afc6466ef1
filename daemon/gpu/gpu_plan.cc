#include "daemon/gpu/gpu_plan.h"

#include <cstring>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/status_macros.h"

namespace ard::gpu {

absl::StatusOr<GpuPlan> PlanGpuJob(const std::string& setting, const std::vector<HostGpus>& hosts,
                                   int cross_rank) {
  if (cross_rank < 0 || cross_rank >= static_cast<int>(hosts.size())) {
    return absl::InvalidArgumentError("cross rank out of range");
  }
  std::vector<std::set<int>> devices(hosts.size());
  bool same_nccl = true;
  std::map<std::string, size_t> host_of_gpu;  // physical GPU -> first host using it
  std::string shared;                         // "GPU x is used by hosts a and b", or ""
  for (size_t h = 0; h < hosts.size(); ++h) {
    for (const std::string& id : hosts[h].rank_gpu_ids) {
      if (id.empty()) continue;
      auto [it, fresh] = host_of_gpu.emplace(id, h);
      if (!fresh && it->second != h && shared.empty()) {
        shared = absl::StrCat("GPU ", id, " is used by hosts ", hosts[it->second].host, " and ",
                              hosts[h].host);
      }
    }
  }
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
  } else if (!shared.empty()) {
    if (setting == "nccl") {
      return absl::InvalidArgumentError(absl::StrCat(
          "gpu_mode=nccl, but ", shared,
          " (daemons on one machine): NCCL cannot put two ranks on one GPU; use hierarchical"));
    }
    plan.mode = GpuMode::kHierarchical;
    plan.reason = absl::StrCat(shared, ", so one NCCL communicator cannot span them");
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

namespace {
absl::StatusOr<UniqueId> ToUniqueId(const GpuHost& host, const std::string& name) {
  if (host.nccl_unique_id().size() != kUniqueIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("host ", name, " offered a ",
                                                   host.nccl_unique_id().size(),
                                                   "-byte NCCL id, not ", kUniqueIdBytes));
  }
  UniqueId id;
  std::memcpy(id.data(), host.nccl_unique_id().data(), kUniqueIdBytes);
  return id;
}
}  // namespace

absl::StatusOr<int> ResolveDevice(const std::vector<std::string>& daemon_pci_bus_ids,
                                  int client_ordinal, const std::string& client_pci_bus_id) {
  bool known = false;
  for (size_t d = 0; d < daemon_pci_bus_ids.size(); ++d) {
    if (daemon_pci_bus_ids[d].empty()) continue;
    known = true;
    if (absl::EqualsIgnoreCase(daemon_pci_bus_ids[d], client_pci_bus_id)) {
      return static_cast<int>(d);
    }
  }
  if (!known || client_pci_bus_id.empty()) return client_ordinal;
  return absl::InvalidArgumentError(
      absl::StrCat("the process's GPU ", client_ordinal, " (PCI bus ", client_pci_bus_id,
                   ") is not one of this daemon's GPUs (", absl::StrJoin(daemon_pci_bus_ids, ", "),
                   "): is the daemon's CUDA_VISIBLE_DEVICES narrower than the process's?"));
}

absl::StatusOr<CrossHostGpuPlan> PlanFromLayout(const JobLayout& job, const GpuLayout& gpus,
                                                int cross_rank) {
  if (gpus.hosts_size() != job.hosts_size()) {
    return absl::InvalidArgumentError(absl::StrCat("GPU layout lists ", gpus.hosts_size(),
                                                   " hosts; the job has ", job.hosts_size()));
  }
  std::vector<HostGpus> hosts;
  bool any_hierarchical = false, any_nccl = false;
  for (int h = 0; h < gpus.hosts_size(); ++h) {
    const GpuHost& g = gpus.hosts(h);
    hosts.push_back(
        HostGpus{job.hosts(h).name(), g.nccl_version(),
                 std::vector<int>(g.rank_devices().begin(), g.rank_devices().end()),
                 std::vector<std::string>(g.rank_gpu_ids().begin(), g.rank_gpu_ids().end())});
    any_hierarchical = any_hierarchical || g.gpu_mode() == "hierarchical";
    any_nccl = any_nccl || g.gpu_mode() == "nccl";
  }
  const std::string setting = any_hierarchical ? "hierarchical" : any_nccl ? "nccl" : "auto";
  CrossHostGpuPlan out;
  ARD_ASSIGN_OR_RETURN(out.plan, PlanGpuJob(setting, hosts, cross_rank));
  if (out.plan.mode == GpuMode::kNccl || cross_rank == 0) {
    ARD_ASSIGN_OR_RETURN(out.id, ToUniqueId(gpus.hosts(0), job.hosts(0).name()));
  }
  if (out.plan.mode == GpuMode::kNccl) {
    // PlanGpuJob's numbering: host by host, each host's distinct GPUs ascending.
    out.comm_rank_of.assign(job.size(), -1);
    int offset = 0;
    for (int h = 0; h < job.hosts_size(); ++h) {
      const std::set<int> devices(hosts[h].rank_devices.begin(), hosts[h].rank_devices.end());
      const auto& ranks = job.hosts(h).ranks();
      for (int i = 0; i < ranks.size() && i < static_cast<int>(hosts[h].rank_devices.size()); ++i) {
        if (ranks[i] < 0 || ranks[i] >= job.size()) {
          return absl::InvalidArgumentError(absl::StrCat("rank ", ranks[i], " outside the job"));
        }
        out.comm_rank_of[ranks[i]] =
            offset + static_cast<int>(
                         std::distance(devices.begin(), devices.find(hosts[h].rank_devices[i])));
      }
      offset += static_cast<int>(devices.size());
    }
  }
  return out;
}

}  // namespace ard::gpu
