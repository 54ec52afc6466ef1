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

namespace {

bool Integer(wire::DataType dtype) {
  switch (dtype) {
    case wire::DataType::kUint8:
    case wire::DataType::kInt8:
    case wire::DataType::kInt32:
    case wire::DataType::kInt64:
      return true;
    default:
      return false;
  }
}

}  // namespace

GpuJob::GpuJob(Device& device, IpcCache& cache, GpuJobOptions options)
    : device_(device), cache_(cache), options_(std::move(options)) {
  for (const CommRank& r : options_.local_comm_ranks) {
    LocalGpu gpu;
    gpu.device = r.device;
    gpus_.push_back(std::move(gpu));
  }
}

// After the executor joined (or when it never ran): this thread now drives what is left.
GpuJob::~GpuJob() {
  Abort(absl::CancelledError("job ended"));
  AbortCommunicators();
  DrainStreams(absl::Seconds(1));
  for (LocalGpu& gpu : gpus_) gpu.stream.reset();  // nothing runs on them after this
  retained_.clear();
}

absl::Status GpuJob::RegisterRank(const GpuRegistration& reg) {
  auto gpu = std::find_if(gpus_.begin(), gpus_.end(),
                          [&](const LocalGpu& g) { return g.device == reg.device; });
  if (gpu == gpus_.end()) {  // gpus_ devices are fixed at construction
    std::vector<int> devices;
    for (const LocalGpu& g : gpus_) devices.push_back(g.device);
    return absl::InvalidArgumentError(absl::StrCat("rank ", reg.rank, " registered GPU ",
                                                   reg.device, ", not one of this job's GPUs [",
                                                   absl::StrJoin(devices, ","), "]"));
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
  absl::MutexLock lock(&mu_);
  if (!ranks_.emplace(reg.rank, std::move(rank)).second) {
    return absl::AlreadyExistsError(absl::StrCat("rank ", reg.rank, " registered its GPU twice"));
  }
  return absl::OkStatus();
}

void GpuJob::UnregisterRank(int rank) {
  std::shared_ptr<Memory> arena;  // the last reference may close a mapping: outside the lock
  std::vector<std::shared_ptr<Event>> events;
  absl::MutexLock lock(&mu_);
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return;
  arena = std::move(it->second.arena);
  events = std::move(it->second.events);
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

absl::Status GpuJob::CheckReduction(wire::DataType dtype, wire::ReduceOp op) const {
  if (!DeviceReductionSupported(dtype)) {
    return absl::InvalidArgumentError("dtype not supported by GPU reductions");
  }
  if (op == wire::ReduceOp::kAdasum) {
    return absl::InvalidArgumentError("Adasum is not reduced on GPU communicators");
  }
  // Average over more processes than GPUs needs NCCL's PreMulSum, which takes floating-point
  // factors only (hierarchical mode across hosts divides in host memory instead).
  if (op == wire::ReduceOp::kAverage && Integer(dtype) && !HostExchange() &&
      options_.world_ranks != options_.comm_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "integer average is not served on the GPU path when several processes share a GPU (",
        options_.world_ranks, " processes on ", options_.comm_size,
        " GPUs): use Sum and divide, or a floating-point dtype"));
  }
  return absl::OkStatus();
}

absl::Status GpuJob::Init(const UniqueId& id) {
  auto run = [&]() -> absl::Status {
    ARD_RETURN_IF_ERROR(Failure());
    for (LocalGpu& gpu : gpus_) {
      ARD_ASSIGN_OR_RETURN(gpu.stream, device_.CreateStream(gpu.device));
      ARD_ASSIGN_OR_RETURN(gpu.fusion, device_.Allocate(gpu.device, options_.initial_fusion_bytes));
    }
    ARD_ASSIGN_OR_RETURN(
        std::vector<std::unique_ptr<Communicator>> comms,
        device_.InitCommunicators(id, options_.comm_size, options_.local_comm_ranks));
    for (size_t i = 0; i < gpus_.size(); ++i) gpus_[i].comm = std::move(comms[i]);
    return AwaitComms(absl::StrCat("communicator init (", options_.comm_size, " ranks)"),
                      options_.init_timeout);
  };
  absl::Status status = run();
  if (!status.ok()) {
    Abort(status);
    AbortCommunicators();
    return Failure();
  }
  return absl::OkStatus();
}

uint64_t GpuJob::fusion_bytes() const {
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
  stop_.store(true);
}

absl::Status GpuJob::CheckHealth() {
  if (absl::Status failure = Failure(); !failure.ok()) {
    AbortCommunicators();
    return failure;
  }
  for (LocalGpu& gpu : gpus_) {
    if (gpu.comm == nullptr) continue;
    absl::StatusOr<CommState> state = gpu.comm->State();
    if (!state.ok()) {
      absl::Status failure(state.status().code(),
                           absl::StrCat("GPU ", gpu.device, " on host ", options_.host_name,
                                        " communicator: ", state.status().message()));
      Abort(failure);
      AbortCommunicators();
      return Failure();
    }
  }
  return absl::OkStatus();
}

// The fusion buffers grow geometrically, so a job allocates (cudaMalloc, and frees: cudaFree
// synchronizes the whole device) a few times in its life, not whenever a fused response is a
// little larger than the last. Every stream is idle here (the previous collective completed).
absl::Status GpuJob::EnsureFusion(size_t bytes) {
  for (LocalGpu& gpu : gpus_) {
    if (gpu.fusion->size() >= bytes) continue;
    size_t grown = std::max<size_t>(gpu.fusion->size(), options_.initial_fusion_bytes);
    while (grown < bytes) grown *= 2;
    gpu.fusion.reset();
    ARD_ASSIGN_OR_RETURN(gpu.fusion, device_.Allocate(gpu.device, grown));
  }
  return absl::OkStatus();
}

absl::StatusOr<char*> GpuJob::HostBuffer(HostSlot slot, size_t bytes) {
  std::unique_ptr<Memory>& buffer = host_[slot];
  if (buffer == nullptr || buffer->size() < bytes) {
    const size_t grown = std::max(bytes, buffer == nullptr ? size_t{0} : 2 * buffer->size());
    buffer.reset();
    ARD_ASSIGN_OR_RETURN(buffer, device_.AllocateHost(std::max<size_t>(grown, 1)));
  }
  return static_cast<char*>(buffer->data());
}

absl::Status GpuJob::Allreduce(const std::vector<GpuTensor>& tensors) {
  for (const GpuTensor& t : tensors) {
    ARD_RETURN_IF_ERROR(CheckReduction(t.meta.dtype, t.meta.op));  // that tensor's error only
  }
  auto run = [&]() -> absl::Status {
    std::vector<FusionTensor> metas;
    for (const GpuTensor& t : tensors) {
      ARD_RETURN_IF_ERROR(CheckTensor(t, Bytes(t.meta)));
      metas.push_back(t.meta);
    }
    if (InPlace(tensors)) return AllreduceInPlace(tensors[0]);
    FusionLayout layout = PlanFusion(metas);
    ARD_RETURN_IF_ERROR(ReduceAll(tensors, layout));
    for (LocalGpu& gpu : gpus_) ARD_RETURN_IF_ERROR(Scatter(gpu, tensors, layout));
    return absl::OkStatus();
  };
  ARD_RETURN_IF_ERROR(Begin());
  return Finish("allreduce", run());
}

}  // namespace ard::gpu
