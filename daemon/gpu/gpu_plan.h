// Which GPU mode a job runs in and which communicator ranks this host holds (DESIGN.md "GPU
// path"). Pure function of the job's layout and the config; control loop, at job formation.
//
// A communicator rank is one (host, GPU): NCCL refuses two ranks on one GPU, so processes that
// share a GPU share its rank (GpuJob reduces them first). kNccl numbers ranks host by host in
// cross-rank order, GPUs ascending within a host; kHierarchical numbers only this host's GPUs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/gpu/device.h"
#include "daemon/gpu/gpu_job.h"
#include "proto/negotiation.pb.h"

namespace ard::gpu {

struct HostGpus {
  std::string host;
  std::string nccl_version;       // HostInfo.nccl_version ("" when built without NCCL)
  std::vector<int> rank_devices;  // GPU of each of this host's job ranks (local rank order)
  // The physical GPU of each rank ("<machine id>/<PCI bus id>"; "" or absent: unknown).
  std::vector<std::string> rank_gpu_ids;
};

struct GpuPlan {
  GpuMode mode = GpuMode::kNccl;
  std::string reason;  // why this mode (for the log and status)
  int comm_size = 0;
  std::vector<CommRank> local_comm_ranks;
};

// `setting` is DaemonConfig.gpu_mode ("auto", "nccl", "hierarchical"); `hosts` is indexed by cross
// rank; `cross_rank` is this host's. InvalidArgument for a host without NCCL or a rank without a
// GPU, or "nccl" forced across hosts whose NCCL versions differ or that share a physical GPU
// (daemons on one machine); "auto" runs hierarchical then.
absl::StatusOr<GpuPlan> PlanGpuJob(const std::string& setting, const std::vector<HostGpus>& hosts,
                                   int cross_rank);

// A cross-host job's plan from the coordinator's GpuLayout (every host's GPUs, NCCL version, mode
// setting and offered id; index = cross rank) and the job's layout (host names). Every host
// derives the same plan: the mode setting is "hierarchical" when any host's is, else "nccl" when
// any host's is, else "auto". Only cross rank 0 offers an id (ncclGetUniqueId starts a bootstrap
// thread that waits for the communicator's ranks, so an unused id would leak it): NCCL mode uses
// it on every host (one communicator spans the job); hierarchical mode uses it on cross rank 0
// and leaves `id` empty elsewhere (that host creates its own for its host-local communicator).
struct CrossHostGpuPlan {
  GpuPlan plan;
  std::optional<UniqueId> id;
  // NCCL mode: each job rank's communicator rank (GpuJobOptions.comm_rank_of), the same on every
  // host; empty in hierarchical mode.
  std::vector<int> comm_rank_of;
};
// Which of this daemon's GPUs a process registered: the process names its GPU by its own CUDA
// ordinal and its PCI bus id (GPU_REGISTER), and its CUDA_VISIBLE_DEVICES may differ from the
// daemon's, so the PCI bus id decides (case-insensitive) when both sides know theirs
// (`daemon_pci_bus_ids`, index = the daemon's ordinal); else the ordinal is taken as the daemon's.
// InvalidArgument when the daemon has no GPU with that bus id.
absl::StatusOr<int> ResolveDevice(const std::vector<std::string>& daemon_pci_bus_ids,
                                  int client_ordinal, const std::string& client_pci_bus_id);

absl::StatusOr<CrossHostGpuPlan> PlanFromLayout(const JobLayout& job, const GpuLayout& gpus,
                                                int cross_rank);

}  // namespace ard::gpu
