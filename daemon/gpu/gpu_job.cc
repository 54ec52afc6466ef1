#include "daemon/gpu/gpu_job.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/collectives/reduce_kernels.h"
#include "daemon/common/status_macros.h"
#include "daemon/gpu/gpu_job_internal.h"

namespace ard::gpu {

using internal::Bytes;

GpuJob::GpuJob(Device& device, IpcCache& cache, GpuJobOptions options)
    : device_(device), cache_(cache), options_(std::move(options)) {
  for (const CommRank& r : options_.local_comm_ranks) {
    LocalGpu gpu;
    gpu.device = r.device;
    gpus_.push_back(std::move(gpu));
  }
}

GpuJob::~GpuJob() {
  Abort(absl::CancelledError("job ended"));
  absl::MutexLock lock(&mu_);
  for (LocalGpu& gpu : gpus_) {
    if (gpu.stream != nullptr) static_cast<void>(device_.Synchronize(*gpu.stream));
  }
}

absl::Status GpuJob::RegisterRank(const GpuRegistration& reg) {
  absl::MutexLock lock(&mu_);
  auto gpu = std::find_if(gpus_.begin(), gpus_.end(),
                          [&](const LocalGpu& g) { return g.device == reg.device; });
  if (gpu == gpus_.end()) {
    std::vector<int> devices;
    for (const LocalGpu& g : gpus_) devices.push_back(g.device);
    return absl::InvalidArgumentError(absl::StrCat("rank ", reg.rank, " registered GPU ",
                                                   reg.device, ", not one of this job's GPUs [",
                                                   absl::StrJoin(devices, ","), "]"));
  }
  if (ranks_.count(reg.rank) != 0) {
    return absl::AlreadyExistsError(absl::StrCat("rank ", reg.rank, " registered its GPU twice"));
  }
  if (reg.events.empty()) return absl::InvalidArgumentError("empty event pool");
  Rank rank;
  rank.reg = reg;
  ARD_ASSIGN_OR_RETURN(rank.arena, cache_.OpenMemory(reg.pid, reg.device, reg.arena));
  if (rank.arena->size() < reg.arena_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("staging arena of rank ", reg.rank, " is ",
                                                   rank.arena->size(), " bytes, not ",
                                                   reg.arena_bytes));
  }
  for (const IpcHandle& handle : reg.events) {
    ARD_ASSIGN_OR_RETURN(std::shared_ptr<Event> event,
                         cache_.OpenEvent(reg.pid, reg.device, handle));
    rank.events.push_back(std::move(event));
  }
  gpu->ranks.push_back(reg.rank);
  std::sort(gpu->ranks.begin(), gpu->ranks.end());
  ranks_.emplace(reg.rank, std::move(rank));
  return absl::OkStatus();
}

void GpuJob::UnregisterRank(int rank) {
  absl::MutexLock lock(&mu_);
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return;
  for (LocalGpu& gpu : gpus_) {
    gpu.ranks.erase(std::remove(gpu.ranks.begin(), gpu.ranks.end(), rank), gpu.ranks.end());
    // Work already issued may still read or write this rank's arena or record its events: let it
    // finish (or fail, after an Abort) before the mappings can be closed.
    if (gpu.stream != nullptr) static_cast<void>(device_.Synchronize(*gpu.stream));
  }
  ranks_.erase(it);
}

absl::Status GpuJob::CheckInput(int rank, uint64_t offset, uint64_t bytes, uint32_t event) const {
  absl::MutexLock lock(&mu_);
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("rank ", rank, " has no GPU registration"));
  }
  const Rank& r = it->second;
  if (event >= r.events.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("event pool index ", event, " out of range (pool of ", r.events.size(), ")"));
  }
  if (offset > r.reg.arena_bytes || bytes > r.reg.arena_bytes - offset) {
    return absl::InvalidArgumentError(absl::StrCat("tensor [", offset, ", +", bytes,
                                                   ") lies outside the staging arena of ",
                                                   r.reg.arena_bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status GpuJob::Init(const UniqueId& id) {
  absl::MutexLock lock(&mu_);
  for (LocalGpu& gpu : gpus_) {
    ARD_ASSIGN_OR_RETURN(gpu.stream, device_.CreateStream(gpu.device));
    ARD_ASSIGN_OR_RETURN(gpu.fusion, device_.Allocate(gpu.device, options_.initial_fusion_bytes));
  }
  auto comms = device_.InitCommunicators(id, options_.comm_size, options_.local_comm_ranks,
                                         options_.init_timeout);
  if (!comms.ok()) {
    Abort(comms.status());
    return comms.status();
  }
  absl::MutexLock failure_lock(&failure_mu_);
  for (size_t i = 0; i < gpus_.size(); ++i) {
    gpus_[i].comm = std::move((*comms)[i]);
    comms_.push_back(gpus_[i].comm.get());
    if (!failure_.ok()) gpus_[i].comm->Abort();  // aborted while initializing
  }
  return absl::OkStatus();
}

uint64_t GpuJob::fusion_bytes() const {
  absl::MutexLock lock(&mu_);
  return gpus_.empty() || gpus_[0].fusion == nullptr ? 0 : gpus_[0].fusion->size();
}

absl::Status GpuJob::Failure() const {
  absl::MutexLock lock(&failure_mu_);
  return failure_;
}

void GpuJob::Abort(absl::Status status) {
  absl::MutexLock lock(&failure_mu_);
  if (!failure_.ok()) return;
  failure_ = std::move(status);
  for (Communicator* comm : comms_) comm->Abort();
}

absl::Status GpuJob::CheckHealth() {
  std::vector<Communicator*> comms;
  {
    absl::MutexLock lock(&failure_mu_);
    if (!failure_.ok()) return failure_;
    comms = comms_;
  }
  for (Communicator* comm : comms) {
    absl::Status status = comm->AsyncError();
    if (!status.ok()) {
      absl::Status failure(
          status.code(), absl::StrCat("GPU ", comm->device(), " communicator: ", status.message()));
      Abort(failure);
      return failure;
    }
  }
  return absl::OkStatus();
}

absl::Status GpuJob::EnsureFusion(size_t bytes) {
  for (LocalGpu& gpu : gpus_) {
    if (gpu.fusion->size() >= bytes) continue;
    ARD_RETURN_IF_ERROR(device_.Synchronize(*gpu.stream));  // the old buffer may be in use
    gpu.fusion.reset();
    size_t grown = std::max<size_t>(bytes, options_.initial_fusion_bytes);
    ARD_ASSIGN_OR_RETURN(gpu.fusion, device_.Allocate(gpu.device, grown));
  }
  return absl::OkStatus();
}

absl::Status GpuJob::Allreduce(const std::vector<GpuTensor>& tensors) {
  ARD_RETURN_IF_ERROR(Failure());
  absl::MutexLock lock(&mu_);
  ARD_RETURN_IF_ERROR(Ready());
  std::vector<FusionTensor> metas;
  for (const GpuTensor& t : tensors) {
    if (!DeviceReductionSupported(t.meta.dtype)) {
      return absl::InvalidArgumentError("dtype not supported by GPU reductions");
    }
    for (const GpuTensorInput& in : t.inputs) {
      auto it = ranks_.find(in.rank);
      if (it == ranks_.end() || in.event >= it->second.events.size() ||
          in.offset + Bytes(t.meta) > it->second.reg.arena_bytes) {
        return absl::InternalError(absl::StrCat("unchecked GPU input of rank ", in.rank));
      }
    }
    metas.push_back(t.meta);
  }
  FusionLayout layout = PlanFusion(metas);
  absl::Status status = ReduceAll(tensors, layout);
  for (LocalGpu& gpu : gpus_) {
    if (status.ok()) status = Scatter(gpu, tensors, layout);
  }
  return Finish(status);
}

absl::Status GpuJob::Finish(absl::Status status) {
  if (!status.ok()) {
    Abort(status);
    return status;
  }
  return CheckHealth();
}

}  // namespace ard::gpu
