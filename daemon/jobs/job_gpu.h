// A job's GPU registrations (DESIGN.md "GPU path"), a part the Job composes once its processes
// register GPUs: GPU_REGISTER keeps each rank's staging arena and event pool (opened once through
// the daemon's IpcCache, so a bad handle is that process's error alone); once every local rank
// registered, the job's negotiation plans the GPU side (negotiator.h) and Start builds the job's
// GpuCollective, which the job's executor prepares and runs. A process that leaves has its rank
// unregistered and, once it holds no other GPU registration, its IPC mappings closed.
//
// Thread: the control loop (the GpuCollective's GpuJob is thread-safe for what is called here).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/dataplane/gpu_collective.h"
#include "daemon/gpu/gpu_plan.h"
#include "daemon/gpu/ipc_cache.h"
#include "daemon/jobs/job_options.h"
#include "daemon/local/frame_codec.h"
#include "daemon/local/session.h"

namespace ard::jobs {

// The daemon's GPU processes across jobs: the IPC mappings and how many GPU-registered sessions
// each process has. Owned by the JobRegistry; loop thread.
struct GpuProcesses {
  explicit GpuProcesses(gpu::Device& device) : ipc(device) {}
  gpu::IpcCache ipc;
  std::map<uint32_t, int> sessions_of_pid;
};

class JobGpu {
 public:
  JobGpu(const JobOptions& options, GpuProcesses& processes, std::string job, int size)
      : options_(options), processes_(processes), job_(std::move(job)), size_(size) {}
  ~JobGpu();

  // GPU_REGISTER of rank `s.rank`: checks and opens its arena and events. The request is
  // answered (GPU_REGISTERED or an error) once the job's GPU side started or failed.
  absl::Status Register(const local::Session& s, const local::DecodedFrame& frame);
  int registered() const { return static_cast<int>(regs_.size()); }
  // This host's ranks' GPUs, in the order of `local_order` (job ranks by local rank).
  gpu::HostGpus Host(const std::vector<int>& local_order) const;
  // Builds the job's GPU data plane from the agreed plan (`cross_host`: the TCP mesh's allreduce
  // for hierarchical mode across hosts; `here[r]`: rank r runs on this host) and answers every
  // GPU_REGISTER. The collective is owned by the executor; this keeps a pointer to it.
  absl::StatusOr<std::unique_ptr<dataplane::GpuCollective>> Start(
      const gpu::CrossHostGpuPlan& plan, std::vector<bool> here, gpu::CrossHostReduce cross_host,
      const std::vector<std::shared_ptr<local::Session>>& members);
  // Answers every pending GPU_REGISTER with `status` (the job fails).
  void FailRegistrations(const absl::Status& status,
                         const std::vector<std::shared_ptr<local::Session>>& members);
  // A GPU_SUBMIT's placement against the job's GPU side; OK for a host-memory SUBMIT.
  absl::Status CheckSubmit(const local::Session& s, const local::DecodedFrame& frame) const;
  // `rank`'s process left (`why`: the job's failure, or OK).
  void Release(int rank, const absl::Status& why);

  bool started() const { return collective_ != nullptr; }
  const std::string& plan() const { return plan_; }  // for status
  // Each member's GPU (-1: not registered), for status.
  int device_of(int rank) const;
  bool any() const { return !regs_.empty(); }

 private:
  const JobOptions& options_;
  GpuProcesses& processes_;
  const std::string job_;
  const int size_;
  std::map<int, gpu::GpuRegistration> regs_;  // by rank
  std::map<int, uint64_t> register_ids_;      // by rank: the GPU_REGISTER to answer
  dataplane::GpuCollective* collective_ = nullptr;  // Not owned (the job's executor owns it)
  std::string plan_;  // mode, communicator ranks, why
};

}  // namespace ard::jobs
