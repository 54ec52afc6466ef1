#include "daemon/jobs/job_gpu.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/gpu/device.h"

namespace ard::jobs {

JobGpu::~JobGpu() {
  for (const auto& [rank, reg] : regs_) {
    if (--processes_.sessions_of_pid[reg.pid] <= 0) {
      processes_.sessions_of_pid.erase(reg.pid);
      processes_.ipc.ReleaseProcess(reg.pid);
    }
  }
}

absl::Status JobGpu::Register(const local::Session& s, const local::DecodedFrame& frame) {
  if (regs_.count(s.rank) != 0 || started()) {
    return absl::AlreadyExistsError(
        absl::StrCat("rank ", s.rank, " of job ", job_, " already registered its GPU"));
  }
  const wire::GpuRegister& g = frame.gpu_register;
  if (g.num_events > options_.max_gpu_event_pool) {
    return absl::ResourceExhaustedError(absl::StrCat("GPU event pool of ", g.num_events,
                                                     " events exceeds max_gpu_event_pool ",
                                                     options_.max_gpu_event_pool));
  }
  gpu::Device& device = *options_.gpu_device;
  auto count = device.DeviceCount();
  if (!count.ok()) return count.status();
  // The process numbers its GPU under its own CUDA_VISIBLE_DEVICES; its PCI bus id says which of
  // ours it is.
  auto ordinal =
      gpu::ResolveDevice(options_.gpu_pci_bus_ids, g.device,
                         std::string(g.pci_bus_id, strnlen(g.pci_bus_id, sizeof(g.pci_bus_id))));
  if (!ordinal.ok()) return ordinal.status();
  if (*ordinal < 0 || *ordinal >= *count) {
    return absl::InvalidArgumentError(absl::StrCat("GPU ", *ordinal,
                                                   " does not exist on this daemon (it sees ",
                                                   *count, " GPUs; same CUDA_VISIBLE_DEVICES?)"));
  }
  gpu::GpuRegistration reg;
  reg.rank = s.rank;
  reg.pid = static_cast<uint32_t>(s.creds().pid);
  reg.device = *ordinal;
  std::copy(std::begin(g.arena_handle), std::end(g.arena_handle), reg.arena.begin());
  reg.arena_bytes = g.arena_bytes;
  for (const auto& e : frame.gpu_events) {
    gpu::IpcHandle h;
    std::copy(e.begin(), e.end(), h.begin());
    reg.events.push_back(h);
  }
  // Opened now, so a bad handle is this process's error alone; GpuJob::RegisterRank reuses them.
  auto arena = processes_.ipc.OpenMemory(reg.pid, reg.device, reg.arena);
  if (!arena.ok()) return arena.status();
  if ((*arena)->size() < reg.arena_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU staging arena is ", (*arena)->size(), " bytes, not ", reg.arena_bytes));
  }
  for (size_t i = 0; i < reg.events.size(); ++i) {
    auto event = processes_.ipc.OpenEvent(reg.pid, reg.device, reg.events[i]);
    if (!event.ok()) {
      return absl::Status(event.status().code(),
                          absl::StrCat("GPU event ", i, ": ", event.status().message()));
    }
  }
  ++processes_.sessions_of_pid[reg.pid];
  regs_[s.rank] = std::move(reg);
  register_ids_[s.rank] = frame.request_id;
  return absl::OkStatus();
}

gpu::HostGpus JobGpu::Host(const std::vector<int>& local_order) const {
  gpu::HostGpus host;
  host.host = options_.host_name;
  host.nccl_version = options_.gpu_device->NcclVersion();  // not the CUDA runtime's
  for (int rank : local_order) host.rank_devices.push_back(regs_.at(rank).device);
  return host;
}

absl::StatusOr<std::unique_ptr<dataplane::GpuCollective>> JobGpu::Start(
    const gpu::CrossHostGpuPlan& agreed, std::vector<bool> here, gpu::CrossHostReduce cross_host,
    const std::vector<std::shared_ptr<local::Session>>& members) {
  const gpu::GpuPlan& plan = agreed.plan;
  gpu::GpuJobOptions opts;
  opts.comm_rank_of = agreed.comm_rank_of;
  opts.mode = plan.mode;
  opts.world_ranks = size_;
  opts.comm_size = plan.comm_size;
  opts.local_comm_ranks = plan.local_comm_ranks;
  opts.initial_fusion_bytes = options_.gpu_fusion_buffer_bytes;
  opts.init_timeout = options_.gpu_init_timeout;
  opts.op_timeout = options_.gpu_op_timeout;
  opts.host_name = options_.host_name;
  if (plan.mode == gpu::GpuMode::kHierarchical) opts.cross_host = std::move(cross_host);
  auto job = std::make_unique<gpu::GpuJob>(*options_.gpu_device, processes_.ipc, opts);
  for (const auto& [rank, reg] : regs_) {
    if (absl::Status st = job->RegisterRank(reg); !st.ok()) {
      return absl::Status(st.code(), absl::StrCat("rank ", rank, ": ", st.message()));
    }
  }
  auto collective =
      std::make_unique<dataplane::GpuCollective>(job_, std::move(here), std::move(job), *agreed.id);
  collective_ = collective.get();
  const char* mode = plan.mode == gpu::GpuMode::kNccl ? "nccl" : "hierarchical";
  plan_ = absl::StrCat(mode, ": ", plan.comm_size, " communicator ranks, ",
                       plan.local_comm_ranks.size(), " here (", plan.reason, ")");
  for (const auto& [rank, request_id] : register_ids_) {
    if (members[rank] != nullptr) {
      members[rank]->Send(local::EncodeEmpty(wire::MsgType::kGpuRegistered, request_id));
    }
  }
  register_ids_.clear();
  Logger("local")->info("job GPU formed job={} mode={} ({}) comm_ranks={} local={} device=\"{}\"",
                        job_, mode, plan.reason, plan.comm_size, plan.local_comm_ranks.size(),
                        options_.gpu_device->Describe());
  return collective;
}

void JobGpu::FailRegistrations(const absl::Status& status,
                               const std::vector<std::shared_ptr<local::Session>>& members) {
  for (const auto& [rank, id] : register_ids_) {
    if (members[rank] != nullptr) members[rank]->Reject(id, status);
  }
  register_ids_.clear();
}

absl::Status JobGpu::CheckSubmit(const local::Session& s, const local::DecodedFrame& frame) const {
  if (frame.type != wire::MsgType::kGpuSubmit) return absl::OkStatus();
  if (!started()) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU_SUBMIT before every rank of job ", job_,
                     " registered its GPU (wait for GPU_REGISTERED)"));
  }
  const wire::Submit& m = frame.submit;
  const auto collective = static_cast<wire::Collective>(m.collective);
  const char* name = negotiation::CollectiveName(collective);
  uint64_t range = m.bytes;  // of the staging arena the result needs
  switch (collective) {
    case wire::Collective::kAllreduce:
    case wire::Collective::kReducescatter:
      if (!gpu::DeviceReductionSupported(static_cast<wire::DataType>(m.dtype))) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", m.name, ": ",
                                                       negotiation::DataTypeName(m.dtype),
                                                       " cannot be reduced on a GPU communicator"));
      }
      if (absl::Status st = collective_->job().CheckReduction(
              static_cast<wire::DataType>(m.dtype), static_cast<wire::ReduceOp>(m.reduce_op));
          !st.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", m.name, ": ", st.message()));
      }
      if (collective == wire::Collective::kReducescatter && m.ndims == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", m.name, ": ", name, " needs at least one dimension"));
      }
      break;
    case wire::Collective::kBroadcast:
      if (m.root_rank < 0 || m.root_rank >= size_) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", m.name, ": ", name, " root rank ",
                                                       m.root_rank, " is outside the job's ", size_,
                                                       " ranks"));
      }
      break;
    case wire::Collective::kAllgather:
      if (m.ndims == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", m.name, ": ", name, " needs at least one dimension"));
      }
      // Every rank's first dimension must match, so the result is size times the input, which
      // the client reserved in its staging arena.
      if (m.bytes > UINT64_MAX / static_cast<uint64_t>(size_)) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", m.name, ": too large"));
      }
      range = m.bytes * static_cast<uint64_t>(size_);
      break;
    default:
      return absl::UnimplementedError(absl::StrCat("tensor ", m.name, ": ", name,
                                                   " is not served for GPU tensors (allreduce, "
                                                   "broadcast, allgather and reducescatter are)"));
  }
  return collective_->job().CheckInput(s.rank, frame.gpu_placement.offset, range,
                                       frame.gpu_placement.event);
}

void JobGpu::Release(int rank, const absl::Status& why) {
  auto it = regs_.find(rank);
  if (it == regs_.end() || rank < 0) return;
  const uint32_t pid = it->second.pid;
  if (collective_ != nullptr) {
    // A failed job's GPU work stops (the executor aborts the communicators); a rank that ended
    // normally leaves the others' collectives alone. Never waits: a collective running keeps the
    // rank's mappings until its work is done.
    if (!why.ok() && !absl::IsCancelled(why)) collective_->job().Abort(why);
    collective_->job().UnregisterRank(rank);
  }
  regs_.erase(it);
  register_ids_.erase(rank);
  if (--processes_.sessions_of_pid[pid] <= 0) {
    processes_.sessions_of_pid.erase(pid);
    processes_.ipc.ReleaseProcess(pid);
    Logger("local")->info("GPU IPC mappings closed pid={} job={}", pid, job_);
  }
}

int JobGpu::device_of(int rank) const {
  auto it = regs_.find(rank);
  return it == regs_.end() ? -1 : it->second.device;
}

}  // namespace ard::jobs
