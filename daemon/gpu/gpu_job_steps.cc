// GpuJob's per-allreduce steps (see gpu_job.h): gather inputs into the fusion buffers, reduce
// across GPUs (and hosts), scatter results back. Executor thread, on the running collective's
// snapshot of the registrations.
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/collectives/reduce_kernels.h"
#include "daemon/common/status_macros.h"
#include "daemon/gpu/gpu_job.h"
#include "daemon/gpu/gpu_job_internal.h"

namespace ard::gpu {

using internal::At;
using internal::Bytes;
using internal::InputOf;

namespace {

// Sum within the host before the communicator divides by the job's size.
wire::ReduceOp LocalOp(wire::ReduceOp op) {
  return op == wire::ReduceOp::kAverage ? wire::ReduceOp::kSum : op;
}

}  // namespace

absl::Status GpuJob::Gather(LocalGpu& gpu, const std::vector<GpuTensor>& tensors,
                            const FusionLayout& layout) {
  // Make the stream wait until each process has its inputs in place.
  for (int rank : gpu.ranks) {
    std::set<uint32_t> events;
    for (const GpuTensor& t : tensors) {
      if (const GpuTensorInput* in = InputOf(t, rank)) events.insert(in->event);
    }
    for (uint32_t e : events) {
      ARD_RETURN_IF_ERROR(device_.Wait(*gpu.stream, *view_.at(rank).events[e]));
    }
  }
  if (gpu.ranks.size() == 1) {  // the common case: device to device, no host involvement
    const Rank& r = view_.at(gpu.ranks[0]);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const GpuTensorInput* in = InputOf(tensors[i], gpu.ranks[0]);
      if (in == nullptr) return absl::InternalError("a local rank has no input");
      ARD_RETURN_IF_ERROR(device_.CopyAsync(At(*gpu.fusion, layout.offsets[i]),
                                            At(*r.arena, in->offset), Bytes(tensors[i].meta),
                                            *gpu.stream));
    }
    return ScaleFusion(gpu, tensors, layout, /*post=*/false);
  }
  // Several processes share this GPU: reduce their inputs in host memory, in rank order.
  ARD_ASSIGN_OR_RETURN(char* sum, HostBuffer(kSumBuffer, layout.total_bytes));
  ARD_ASSIGN_OR_RETURN(char* part, HostBuffer(kPartBuffer, layout.total_bytes));
  for (size_t k = 0; k < gpu.ranks.size(); ++k) {
    const Rank& r = view_.at(gpu.ranks[k]);
    char* dst = k == 0 ? sum : part;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const GpuTensorInput* in = InputOf(tensors[i], gpu.ranks[k]);
      if (in == nullptr) return absl::InternalError("a local rank has no input");
      ARD_RETURN_IF_ERROR(device_.CopyAsync(dst + layout.offsets[i], At(*r.arena, in->offset),
                                            Bytes(tensors[i].meta), *gpu.stream));
    }
    ARD_RETURN_IF_ERROR(AwaitStream(gpu, "host-staged gather"));
    for (size_t i = 0; i < tensors.size(); ++i) {  // each input scaled before it is reduced
      const GpuTensor& t = tensors[i];
      if (t.prescale != 1.0) {
        collectives::Scale(dst + layout.offsets[i], t.meta.count, t.meta.dtype, t.prescale);
      }
    }
    if (k == 0) continue;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const FusionTensor& m = tensors[i].meta;
      collectives::ReduceInto(sum + layout.offsets[i], part + layout.offsets[i], m.count, m.dtype,
                              LocalOp(m.op));
    }
  }
  ARD_RETURN_IF_ERROR(device_.CopyAsync(gpu.fusion->data(), sum, layout.total_bytes, *gpu.stream));
  return AwaitStream(gpu, "host-staged gather");
}

// Every run of the fusion buffer allreduced on every local GPU, in one group call. host_local: the
// host's part of a hierarchical allreduce (Average becomes Sum; the cross-host step divides).
absl::Status GpuJob::AllreduceRuns(const FusionLayout& layout, bool host_local) {
  return Grouped("allreduce", [&](LocalGpu& gpu) -> absl::Status {
    for (const FusionRun& run : layout.runs) {
      char* buf = At(*gpu.fusion, run.offset);
      ARD_RETURN_IF_ERROR(gpu.comm->Allreduce(buf, buf, run.count, run.dtype,
                                              host_local ? LocalOp(run.op) : run.op,
                                              options_.world_ranks, *gpu.stream));
    }
    return absl::OkStatus();
  });
}

bool GpuJob::InPlace(const std::vector<GpuTensor>& tensors) const {
  if (tensors.size() != 1 || HostExchange()) return false;
  const GpuTensor& t = tensors[0];
  if (t.prescale != 1.0 || t.postscale != 1.0 || t.meta.count == 0) return false;
  for (const LocalGpu& gpu : gpus_) {
    if (gpu.ranks.size() != 1) return false;
  }
  return true;
}

absl::Status GpuJob::AllreduceInPlace(const GpuTensor& tensor) {
  for (LocalGpu& gpu : gpus_) ARD_RETURN_IF_ERROR(WaitInputs(gpu, tensor));
  ARD_RETURN_IF_ERROR(Grouped("allreduce", [&](LocalGpu& gpu) {
    char* buf = At(*view_.at(gpu.ranks[0]).arena, InputOf(tensor, gpu.ranks[0])->offset);
    return gpu.comm->Allreduce(buf, buf, tensor.meta.count, tensor.meta.dtype, tensor.meta.op,
                               options_.world_ranks, *gpu.stream);
  }));
  for (LocalGpu& gpu : gpus_) {
    Rank& r = view_.at(gpu.ranks[0]);
    ARD_RETURN_IF_ERROR(
        device_.Record(*r.events[InputOf(tensor, gpu.ranks[0])->event], *gpu.stream));
  }
  return absl::OkStatus();
}

absl::Status GpuJob::ReduceHierarchical(const FusionLayout& layout) {
  // 1. Within the host: every local GPU holds the host's reduction.
  ARD_RETURN_IF_ERROR(AllreduceRuns(layout, /*host_local=*/true));
  // 2. Between hosts, from host memory, over the TCP data plane; Average divides here.
  LocalGpu& root = gpus_[0];
  ARD_ASSIGN_OR_RETURN(char* host, HostBuffer(kSumBuffer, layout.total_bytes));
  ARD_RETURN_IF_ERROR(
      device_.CopyAsync(host, root.fusion->data(), layout.total_bytes, *root.stream));
  ARD_RETURN_IF_ERROR(AwaitStream(root, "hierarchical copy to the host"));
  for (const FusionRun& run : layout.runs) {
    ARD_RETURN_IF_ERROR(
        options_.cross_host(host + run.offset, run.count, run.dtype, LocalOp(run.op)));
    if (run.op == wire::ReduceOp::kAverage) {
      collectives::Scale(host + run.offset, run.count, run.dtype, 1.0 / options_.world_ranks);
    }
  }
  ARD_RETURN_IF_ERROR(
      device_.CopyAsync(root.fusion->data(), host, layout.total_bytes, *root.stream));
  ARD_RETURN_IF_ERROR(AwaitStream(root, "hierarchical copy from the host"));
  // 3. Back to every local GPU.
  if (gpus_.size() == 1) return absl::OkStatus();
  return Grouped("hierarchical broadcast", [&](LocalGpu& gpu) {
    return gpu.comm->Broadcast(gpu.fusion->data(), gpu.fusion->data(), layout.total_bytes,
                               wire::DataType::kUint8, root.comm->rank(), *gpu.stream);
  });
}

absl::Status GpuJob::Scatter(LocalGpu& gpu, const std::vector<GpuTensor>& tensors,
                             const FusionLayout& layout) {
  for (int rank : gpu.ranks) {
    Rank& r = view_.at(rank);
    std::set<uint32_t> events;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const GpuTensorInput* in = InputOf(tensors[i], rank);
      if (in == nullptr) continue;
      ARD_RETURN_IF_ERROR(device_.CopyAsync(At(*r.arena, in->offset),
                                            At(*gpu.fusion, layout.offsets[i]),
                                            Bytes(tensors[i].meta), *gpu.stream));
      events.insert(in->event);
    }
    // The process's stream waits on these once it gets COMPLETE.
    for (uint32_t e : events) ARD_RETURN_IF_ERROR(device_.Record(*r.events[e], *gpu.stream));
  }
  return absl::OkStatus();
}

}  // namespace ard::gpu
