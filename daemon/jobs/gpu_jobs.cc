// JobRegistry's GPU half (DESIGN.md "GPU path"): GPU_REGISTER keeps each process's staging arena
// and event pool (opened once through the daemon's IpcCache), the job's GpuJob is created once
// every local rank registered its GPU, GPU_SUBMITs go through the same readiness table as host
// tensors, and their committed responses run on the job's GpuExecutor. A process that leaves has
// its rank unregistered and, once it holds no other GPU registration, its IPC mappings closed.
//
// Single-host jobs form their GPU side as soon as every local rank registered. A cross-host job's
// host then sends its GPUs (GpuHost) to the coordinator, which sends every host the GpuLayout once
// all did (a second round after formation: GPU_REGISTER follows WELCOME); each host derives the
// same plan from it (gpu_plan.h). Cross-host GPU responses run on the job's data-plane executor
// thread, in the committed order with its CPU responses; hierarchical mode crosses hosts on the
// job's TCP mesh from there.
#include <algorithm>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/logging.h"
#include "daemon/dataplane/tcp/host_collectives.h"
#include "daemon/gpu/gpu_plan.h"
#include "daemon/jobs/job_registry.h"
#include "daemon/jobs/local_job.h"

namespace ard::jobs {

using local::Session;

void JobRegistry::HandleGpuRegister(const std::shared_ptr<Session>& s,
                                    const local::DecodedFrame& frame) {
  const uint64_t id = frame.request_id;
  if (options_.gpu_device == nullptr) {
    return ReplyError(
        *s, id,
        absl::FailedPreconditionError(absl::StrCat(
            "no GPU on this daemon: ",
            options_.gpu_unavailable.empty() ? "no GPU device" : options_.gpu_unavailable)));
  }
  if (!s->welcomed) {
    return ReplyError(
        *s, id, absl::FailedPreconditionError("GPU_REGISTER before the job formed (no WELCOME)"));
  }
  LocalJob& job = *jobs_.at(s->job);
  if (job.state == LocalJob::State::kFailed) {
    return ReplyError(*s, id, absl::AbortedError(job.failure));
  }
  if (job.gpu_regs.count(s->rank) != 0 || job.gpu != nullptr) {
    return ReplyError(*s, id,
                      absl::AlreadyExistsError(absl::StrCat("rank ", s->rank, " of job ", job.name,
                                                            " already registered its GPU")));
  }
  const wire::GpuRegister& g = frame.gpu_register;
  if (g.num_events > options_.max_gpu_event_pool) {
    return ReplyError(*s, id,
                      absl::ResourceExhaustedError(
                          absl::StrCat("GPU event pool of ", g.num_events, " events exceeds ",
                                       "max_gpu_event_pool ", options_.max_gpu_event_pool)));
  }
  auto count = options_.gpu_device->DeviceCount();
  if (!count.ok()) return ReplyError(*s, id, count.status());
  // The process numbers its GPU under its own CUDA_VISIBLE_DEVICES; its PCI bus id says which of
  // ours it is.
  auto device =
      gpu::ResolveDevice(options_.gpu_pci_bus_ids, g.device,
                         std::string(g.pci_bus_id, strnlen(g.pci_bus_id, sizeof(g.pci_bus_id))));
  if (!device.ok()) return ReplyError(*s, id, device.status());
  if (*device < 0 || *device >= *count) {
    return ReplyError(*s, id,
                      absl::InvalidArgumentError(
                          absl::StrCat("GPU ", *device, " does not exist on this daemon (it sees ",
                                       *count, " GPUs; same CUDA_VISIBLE_DEVICES?)")));
  }
  gpu::GpuRegistration reg;
  reg.rank = s->rank;
  reg.pid = static_cast<uint32_t>(s->creds().pid);
  reg.device = *device;
  std::copy(std::begin(g.arena_handle), std::end(g.arena_handle), reg.arena.begin());
  reg.arena_bytes = g.arena_bytes;
  for (const auto& e : frame.gpu_events) {
    gpu::IpcHandle h;
    std::copy(e.begin(), e.end(), h.begin());
    reg.events.push_back(h);
  }
  // Opened now, so a bad handle is this process's error alone; GpuJob::RegisterRank reuses them.
  auto arena = ipc_cache_->OpenMemory(reg.pid, reg.device, reg.arena);
  if (!arena.ok()) return ReplyError(*s, id, arena.status());
  if ((*arena)->size() < reg.arena_bytes) {
    return ReplyError(
        *s, id,
        absl::InvalidArgumentError(absl::StrCat("GPU staging arena is ", (*arena)->size(),
                                                " bytes, not ", reg.arena_bytes)));
  }
  for (size_t i = 0; i < reg.events.size(); ++i) {
    auto event = ipc_cache_->OpenEvent(reg.pid, reg.device, reg.events[i]);
    if (!event.ok()) {
      return ReplyError(
          *s, id,
          absl::Status(event.status().code(),
                       absl::StrCat("GPU event ", i, ": ", event.status().message())));
    }
  }
  ++gpu_sessions_of_pid_[reg.pid];
  job.gpu_regs[s->rank] = std::move(reg);
  job.gpu_register_ids[s->rank] = id;
  int local_ranks = 0;
  for (const auto& m : job.members) local_ranks += m != nullptr;
  if (static_cast<int>(job.gpu_regs.size()) < local_ranks) return;
  if (!job.cross_host) return FormGpu(job);
  SendGpuHost(job);
}

void JobRegistry::FailGpuForming(LocalJob& job, const absl::Status& status) {
  for (const auto& [rank, id] : job.gpu_register_ids) {
    if (job.members[rank] != nullptr) ReplyError(*job.members[rank], id, status);
  }
  FailJob(job, status);
}

void JobRegistry::FormGpu(LocalJob& job) {
  gpu::HostGpus host;
  host.host = options_.host_name;
  host.nccl_version = options_.gpu_device->Describe();  // one host: only needs to be non-empty
  for (const auto& [rank, reg] : job.gpu_regs) host.rank_devices.push_back(reg.device);
  auto plan = gpu::PlanGpuJob(options_.gpu_mode, {host}, 0);
  if (!plan.ok()) return FailGpuForming(job, plan.status());
  plan->mode = gpu::GpuMode::kNccl;  // one host: hierarchical would add nothing
  auto unique_id = options_.gpu_device->NewUniqueId();
  if (!unique_id.ok()) return FailGpuForming(job, unique_id.status());
  StartGpu(job, *plan, *unique_id);
}

void JobRegistry::SendGpuHost(LocalJob& job) {
  // This host's ranks in local rank order (the order of JobLayout.hosts[me].ranks).
  const JobLayout::JobHost& me = job.layout.hosts(job.context->cross_rank);
  NegotiateRequest request;
  request.set_job_id(job.layout.job_id());
  request.set_host(options_.host_name);
  GpuHost* gpu = request.mutable_gpu();
  for (int rank : me.ranks()) {
    const int device = job.gpu_regs.at(rank).device;
    gpu->add_rank_devices(device);
    gpu->add_rank_gpu_ids(device < static_cast<int>(options_.gpu_physical_ids.size())
                              ? options_.gpu_physical_ids[device]
                              : "");
  }
  gpu->set_nccl_version(options_.gpu_device->Describe());
  gpu->set_gpu_mode(options_.gpu_mode);
  if (job.context->cross_rank == 0) {  // the only offer (see gpu::PlanFromLayout)
    auto unique_id = options_.gpu_device->NewUniqueId();
    if (!unique_id.ok()) return FailGpuForming(job, unique_id.status());
    gpu->set_nccl_unique_id(unique_id->data(), unique_id->size());
  }
  const std::string name = job.name;
  const uint32_t local_id = job.id;
  coordinator_->NegotiateAsync(
      request, [this, name, local_id](absl::StatusOr<NegotiateResponse> r) {
        if (r.ok()) return;
        loop_.Post([this, name, local_id, status = r.status()] {
          LocalJob* j = FindJob(name, local_id);
          if (j == nullptr || j->state != LocalJob::State::kRunning) return;
          FailGpuForming(*j, absl::Status(status.code(),
                                          absl::StrCat("the coordinator refused this host's GPUs: ",
                                                       status.message())));
        });
      });
  Logger("local")->info("job GPUs sent to the coordinator job={} devices=[{}]", job.name,
                        absl::StrJoin(gpu->rank_devices(), ","));
}

void JobRegistry::OnGpuLayout(LocalJob& job, const GpuLayout& layout) {
  const int local_ranks = job.layout.hosts(job.context->cross_rank).ranks_size();
  if (job.gpu != nullptr || static_cast<int>(job.gpu_register_ids.size()) != local_ranks) {
    return FailGpuForming(job, absl::InternalError(absl::StrCat(
                                   "GPU layout of job ", job.name,
                                   " arrived before this host's ranks registered their GPUs")));
  }
  auto plan = gpu::PlanFromLayout(job.layout, layout, job.context->cross_rank);
  if (!plan.ok()) return FailGpuForming(job, plan.status());
  if (!plan->id) {  // hierarchical, not cross rank 0: a communicator of this host's GPUs only
    auto own = options_.gpu_device->NewUniqueId();
    if (!own.ok()) return FailGpuForming(job, own.status());
    plan->id = *own;
  }
  StartGpu(job, plan->plan, *plan->id, plan->comm_rank_of);
}

void JobRegistry::StartGpu(LocalJob& job, const gpu::GpuPlan& plan, const gpu::UniqueId& id,
                           std::vector<int> comm_rank_of) {
  gpu::GpuJobOptions opts;
  opts.comm_rank_of = std::move(comm_rank_of);
  opts.mode = plan.mode;
  opts.world_ranks = job.size;
  opts.comm_size = plan.comm_size;
  opts.local_comm_ranks = plan.local_comm_ranks;
  opts.initial_fusion_bytes = options_.gpu_fusion_buffer_bytes;
  opts.init_timeout = options_.gpu_init_timeout;
  if (plan.mode == gpu::GpuMode::kHierarchical && job.context->cross_size > 1) {
    // Runs on the job's data-plane executor thread (DispatchGpu), which owns the mesh.
    opts.cross_host = [context = job.context](void* buf, size_t count, wire::DataType dtype,
                                              wire::ReduceOp op) {
      tcp::TcpMesh* mesh = context->mesh();
      if (mesh == nullptr) return absl::UnavailableError("the job's data plane is not connected");
      return tcp::AllreduceInPlace(*mesh, buf, count, dtype, op);
    };
  }
  auto gpu_job = std::make_unique<gpu::GpuJob>(*options_.gpu_device, *ipc_cache_, opts);
  for (const auto& [rank, reg] : job.gpu_regs) {
    if (absl::Status st = gpu_job->RegisterRank(reg); !st.ok()) {
      return FailGpuForming(
          job, absl::Status(st.code(), absl::StrCat("rank ", rank, ": ", st.message())));
    }
  }
  const std::string name = job.name;
  const uint32_t job_id = job.id;
  job.gpu = std::make_unique<GpuExecutor>(
      job.context, std::move(gpu_job), id, [this, name, job_id](absl::Status status) {
        loop_.Post([this, name, job_id, status] {
          LocalJob* j = FindJob(name, job_id);
          if (j != nullptr && j->state != LocalJob::State::kFailed) FailJob(*j, status);
        });
      });
  job.gpu_plan = absl::StrCat(plan.mode == gpu::GpuMode::kNccl ? "nccl" : "hierarchical", ": ",
                              plan.comm_size, " communicator ranks, ", plan.local_comm_ranks.size(),
                              " here (", plan.reason, ")");
  for (const auto& [rank, request_id] : job.gpu_register_ids) {
    if (job.members[rank] != nullptr) {
      job.members[rank]->Send(local::EncodeEmpty(wire::MsgType::kGpuRegistered, request_id));
    }
  }
  Logger("local")->info("job GPU formed job={} mode={} ({}) comm_ranks={} local={} device=\"{}\"",
                        job.name, plan.mode == gpu::GpuMode::kNccl ? "nccl" : "hierarchical",
                        plan.reason, plan.comm_size, plan.local_comm_ranks.size(),
                        options_.gpu_device->Describe());
}

absl::Status JobRegistry::CheckGpuSubmit(LocalJob& job, const Session& s,
                                         const local::DecodedFrame& frame) {
  if (frame.type != wire::MsgType::kGpuSubmit) return absl::OkStatus();
  if (job.gpu == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU_SUBMIT before every rank of job ", job.name,
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
      if (collective == wire::Collective::kReducescatter && m.ndims == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", m.name, ": ", name, " needs at least one dimension"));
      }
      break;
    case wire::Collective::kBroadcast:
      if (m.root_rank < 0 || m.root_rank >= job.size) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", m.name, ": ", name, " root rank ",
                                                       m.root_rank, " is outside the job's ",
                                                       job.size, " ranks"));
      }
      break;
    case wire::Collective::kAllgather:
      if (m.ndims == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", m.name, ": ", name, " needs at least one dimension"));
      }
      // Every rank's first dimension must match, so the result is size times the input, which
      // the client reserved in its staging arena.
      if (m.bytes > UINT64_MAX / static_cast<uint64_t>(job.size)) {
        return absl::InvalidArgumentError(absl::StrCat("tensor ", m.name, ": too large"));
      }
      range = m.bytes * static_cast<uint64_t>(job.size);
      break;
    default:
      return absl::UnimplementedError(absl::StrCat("tensor ", m.name, ": ", name,
                                                   " is not served for GPU tensors (allreduce, "
                                                   "broadcast, allgather and reducescatter are)"));
  }
  return job.gpu->job().CheckInput(s.rank, frame.gpu_placement.offset, range,
                                   frame.gpu_placement.event);
}

bool JobRegistry::DispatchGpu(LocalJob& job, negotiation::Response& response) {
  bool gpu = false;
  for (const auto& t : response.tensors) {
    for (const auto& r : t.ranks) gpu = gpu || (r && r->gpu);
  }
  if (!gpu) return false;
  if (job.gpu == nullptr) {
    // Cannot happen (CheckGpuSubmit), but never hand a GPU tensor to the host executor.
    response.error = absl::InternalError("GPU tensor without a GPU executor");
    for (const auto& t : response.tensors) {
      for (const auto& r : t.ranks) {
        if (r && job.members[r->rank] != nullptr) {
          dataplane::Executor::SendComplete(*job.members[r->rank], *r, response.error, nullptr);
        }
      }
    }
    return true;
  }
  if (job.cross_host) {
    GpuExecutor* gpu = job.gpu.get();  // stopped before the data-plane executor (RemoveIfEmpty)
    job.executor->Enqueue(std::move(response),
                          [gpu](const negotiation::Response& r) { gpu->ExecuteOnCaller(r); });
  } else {
    job.gpu->Enqueue(std::move(response));
  }
  return true;
}

void JobRegistry::ReleaseGpu(LocalJob& job, const Session& s) {
  auto it = job.gpu_regs.find(s.rank);
  if (it == job.gpu_regs.end() || s.rank < 0) return;
  const uint32_t pid = it->second.pid;
  if (job.gpu != nullptr) {
    // Its memory may be mid-collective: abort first so the executor lets go of it promptly.
    job.gpu->job().Abort(job.context->failure().ok()
                             ? absl::AbortedError(absl::StrCat("rank ", s.rank, " left"))
                             : job.context->failure());
    job.gpu->job().UnregisterRank(s.rank);
  }
  job.gpu_regs.erase(it);
  job.gpu_register_ids.erase(s.rank);
  if (--gpu_sessions_of_pid_[pid] <= 0) {
    gpu_sessions_of_pid_.erase(pid);
    ipc_cache_->ReleaseProcess(pid);
    Logger("local")->info("GPU IPC mappings closed pid={} job={}", pid, job.name);
  }
}

}  // namespace ard::jobs
