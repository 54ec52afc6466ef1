// GpuJob's broadcast, allgather and reducescatter, and the steps Allreduce shares with them (see
// gpu_job.h). Executor thread, on the running collective's snapshot of the registrations.
//
// How each runs:
// - kNccl (and a single host): with every job rank's communicator rank known (comm_rank_of, or
//   derived on a single host), native calls: ncclBroadcast from the root's GPU; ncclAllGather
//   when each GPU holds exactly one job rank; ncclReduceScatter when, in addition, job rank r is
//   communicator rank r and the blocks are equal. Otherwise (several processes on a GPU, uneven
//   blocks, unknown ranks): broadcast and allgather become a byte-wise sum of a zeroed buffer
//   into which only the owners wrote (exact for any dtype), reducescatter an allreduce of the
//   whole tensor of which each rank takes its block.
// - kHierarchical across hosts (only the CrossHostReduce allreduce of a host buffer is
//   available): the same zeroed-buffer byte sums through host memory, and reducescatter as the
//   hierarchical allreduce, then each rank's block.
#include <algorithm>
#include <numeric>
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

// Every comm rank holds exactly one job rank.
bool OneRankPerGpu(const std::vector<int>& comm, int comm_size) {
  if (comm.empty() || static_cast<int>(comm.size()) != comm_size) return false;
  std::set<int> seen(comm.begin(), comm.end());
  return static_cast<int>(seen.size()) == comm_size && *seen.begin() == 0 &&
         *seen.rbegin() == comm_size - 1;
}

}  // namespace

std::vector<int> GpuJob::CommRankOf() const {
  const int world = options_.world_ranks;
  if (!options_.comm_rank_of.empty()) {
    if (static_cast<int>(options_.comm_rank_of.size()) != world) return {};
    return options_.comm_rank_of;
  }
  if (static_cast<int>(view_.size()) != world) return {};  // other hosts' ranks: unknown
  std::vector<int> out(world, -1);
  for (const LocalGpu& gpu : gpus_) {
    for (int r : gpu.ranks) {
      if (r < 0 || r >= world) return {};
      out[r] = gpu.comm->rank();
    }
  }
  if (std::count(out.begin(), out.end(), -1) != 0) return {};
  return out;
}

// Checks that every local rank has an input whose `bytes` range and event lie in its arena.
absl::Status GpuJob::WaitInputs(LocalGpu& gpu, const GpuTensor& tensor) {
  for (int rank : gpu.ranks) {
    const GpuTensorInput* in = InputOf(tensor, rank);
    if (in == nullptr) return absl::InternalError("a local rank has no input");
    ARD_RETURN_IF_ERROR(device_.Wait(*gpu.stream, *view_.at(rank).events[in->event]));
  }
  return absl::OkStatus();
}

absl::Status GpuJob::GroupedBytesSum(size_t bytes) {
  return Grouped("byte-wise sum", [&](LocalGpu& gpu) {
    return gpu.comm->Allreduce(gpu.fusion->data(), gpu.fusion->data(), bytes,
                               wire::DataType::kUint8, wire::ReduceOp::kSum, 1, *gpu.stream);
  });
}

absl::Status GpuJob::ScaleFusion(LocalGpu& gpu, const std::vector<GpuTensor>& tensors,
                                 const FusionLayout& layout, bool post) {
  size_t lo = layout.total_bytes, hi = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GpuTensor& t = tensors[i];
    if ((post ? t.postscale : t.prescale) == 1.0 || t.meta.count == 0) continue;
    lo = std::min(lo, layout.offsets[i]);
    hi = std::max(hi, layout.offsets[i] + Bytes(t.meta));
  }
  if (hi <= lo) return absl::OkStatus();
  // NCCL has no scale operation and the daemon has no device kernels: scale in host memory.
  ARD_ASSIGN_OR_RETURN(char* host, HostBuffer(kScaleBuffer, hi - lo));
  ARD_RETURN_IF_ERROR(device_.CopyAsync(host, At(*gpu.fusion, lo), hi - lo, *gpu.stream));
  ARD_RETURN_IF_ERROR(AwaitStream(gpu, "scaling copy"));
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GpuTensor& t = tensors[i];
    const double factor = post ? t.postscale : t.prescale;
    if (factor == 1.0 || t.meta.count == 0) continue;
    collectives::Scale(host + (layout.offsets[i] - lo), t.meta.count, t.meta.dtype, factor);
  }
  ARD_RETURN_IF_ERROR(device_.CopyAsync(At(*gpu.fusion, lo), host, hi - lo, *gpu.stream));
  return AwaitStream(gpu, "scaling copy");
}

// Inputs into the fusion buffers (prescaled), reduced across GPUs and hosts, postscaled: every
// local GPU's fusion buffer then holds the full result.
absl::Status GpuJob::ReduceAll(const std::vector<GpuTensor>& tensors, const FusionLayout& layout) {
  ARD_RETURN_IF_ERROR(EnsureFusion(layout.total_bytes));
  for (LocalGpu& gpu : gpus_) ARD_RETURN_IF_ERROR(Gather(gpu, tensors, layout));
  ARD_RETURN_IF_ERROR(HostExchange() ? ReduceHierarchical(layout)
                                     : AllreduceRuns(layout, /*host_local=*/false));
  for (LocalGpu& gpu : gpus_) ARD_RETURN_IF_ERROR(ScaleFusion(gpu, tensors, layout, true));
  return absl::OkStatus();
}

// Through host memory: waits for the inputs, `fill` builds the result in a zeroed host buffer of
// `result_bytes` (and exchanges it with the other hosts), which is copied to every local rank's
// staging range; the rank's event is recorded after it.
absl::Status GpuJob::HostCollective(const GpuTensor& tensor, size_t result_bytes,
                                    const std::function<absl::Status(char* host)>& fill) {
  for (LocalGpu& gpu : gpus_) ARD_RETURN_IF_ERROR(WaitInputs(gpu, tensor));
  ARD_ASSIGN_OR_RETURN(char* host, HostBuffer(kSumBuffer, result_bytes));
  std::fill(host, host + result_bytes, 0);
  absl::Status status = fill(host);
  for (LocalGpu& gpu : gpus_) {
    for (int rank : gpu.ranks) {
      if (!status.ok()) break;
      const GpuTensorInput* in = InputOf(tensor, rank);
      Rank& r = view_.at(rank);
      status = device_.CopyAsync(At(*r.arena, in->offset), host, result_bytes, *gpu.stream);
      if (status.ok()) status = device_.Record(*r.events[in->event], *gpu.stream);
    }
  }
  ARD_RETURN_IF_ERROR(status);
  return AwaitStreams("host-staged copy");
}

absl::Status GpuJob::Broadcast(const GpuTensor& tensor, int root) {
  if (root < 0 || root >= options_.world_ranks) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast root ", root, " outside the job's ",
                                                   options_.world_ranks, " ranks"));
  }
  const size_t bytes = Bytes(tensor.meta);
  auto run = [&]() -> absl::Status {
    ARD_RETURN_IF_ERROR(CheckTensor(tensor, bytes));
    LocalGpu* root_gpu = nullptr;  // the GPU holding the root, when it is on this host
    for (LocalGpu& gpu : gpus_) {
      if (std::count(gpu.ranks.begin(), gpu.ranks.end(), root) != 0) root_gpu = &gpu;
    }
    const GpuTensorInput* root_in = InputOf(tensor, root);
    if (root_gpu != nullptr && root_in == nullptr) return absl::InternalError("root has no input");
    if (HostExchange()) {
      return HostCollective(tensor, bytes, [&](char* host) -> absl::Status {
        if (root_gpu != nullptr) {
          ARD_RETURN_IF_ERROR(device_.CopyAsync(host, At(*view_.at(root).arena, root_in->offset),
                                                bytes, *root_gpu->stream));
          ARD_RETURN_IF_ERROR(AwaitStream(*root_gpu, "broadcast root copy"));
        }
        return options_.cross_host(host, bytes, wire::DataType::kUint8, wire::ReduceOp::kSum);
      });
    }
    ARD_RETURN_IF_ERROR(EnsureFusion(bytes));
    for (LocalGpu& gpu : gpus_) ARD_RETURN_IF_ERROR(WaitInputs(gpu, tensor));
    const std::vector<int> comm = CommRankOf();
    if (comm.empty()) {
      for (LocalGpu& gpu : gpus_) {
        ARD_RETURN_IF_ERROR(device_.MemsetAsync(gpu.fusion->data(), 0, bytes, *gpu.stream));
      }
    }
    if (root_gpu != nullptr) {
      ARD_RETURN_IF_ERROR(device_.CopyAsync(root_gpu->fusion->data(),
                                            At(*view_.at(root).arena, root_in->offset), bytes,
                                            *root_gpu->stream));
    }
    if (comm.empty()) {
      ARD_RETURN_IF_ERROR(GroupedBytesSum(bytes));
    } else {
      ARD_RETURN_IF_ERROR(Grouped("broadcast", [&](LocalGpu& gpu) {
        return gpu.comm->Broadcast(gpu.fusion->data(), gpu.fusion->data(), bytes,
                                   wire::DataType::kUint8, comm[root], *gpu.stream);
      }));
    }
    return ScatterBlocks(tensor, [&](int) { return std::vector<Piece>{{0, 0, bytes}}; });
  };
  ARD_RETURN_IF_ERROR(Begin());
  return Finish("broadcast", run());
}

absl::Status GpuJob::Allgather(const GpuTensor& tensor) {
  const size_t block = Bytes(tensor.meta);
  const int world = options_.world_ranks;
  const size_t total = block * world;
  auto run = [&]() -> absl::Status {
    ARD_RETURN_IF_ERROR(CheckTensor(tensor, total));
    if (HostExchange()) {
      return HostCollective(tensor, total, [&](char* host) -> absl::Status {
        for (LocalGpu& gpu : gpus_) {
          for (int rank : gpu.ranks) {
            ARD_RETURN_IF_ERROR(device_.CopyAsync(
                host + rank * block, At(*view_.at(rank).arena, InputOf(tensor, rank)->offset),
                block, *gpu.stream));
          }
        }
        ARD_RETURN_IF_ERROR(AwaitStreams("allgather host copy"));
        return options_.cross_host(host, total, wire::DataType::kUint8, wire::ReduceOp::kSum);
      });
    }
    ARD_RETURN_IF_ERROR(EnsureFusion(total));
    for (LocalGpu& gpu : gpus_) ARD_RETURN_IF_ERROR(WaitInputs(gpu, tensor));
    const std::vector<int> comm = CommRankOf();
    const bool native = OneRankPerGpu(comm, options_.comm_size);
    for (LocalGpu& gpu : gpus_) {
      if (!native) {
        ARD_RETURN_IF_ERROR(device_.MemsetAsync(gpu.fusion->data(), 0, total, *gpu.stream));
      }
      for (int rank : gpu.ranks) {  // each block where the collective expects it
        const size_t at = (native ? gpu.comm->rank() : rank) * block;
        ARD_RETURN_IF_ERROR(device_.CopyAsync(
            At(*gpu.fusion, at), At(*view_.at(rank).arena, InputOf(tensor, rank)->offset), block,
            *gpu.stream));
      }
    }
    if (native) {
      ARD_RETURN_IF_ERROR(Grouped("allgather", [&](LocalGpu& gpu) {
        return gpu.comm->Allgather(At(*gpu.fusion, gpu.comm->rank() * block), gpu.fusion->data(),
                                   block, wire::DataType::kUint8, *gpu.stream);
      }));
    } else {
      ARD_RETURN_IF_ERROR(GroupedBytesSum(total));
    }
    bool in_order = true;  // job rank q's block is at q * block
    for (int q = 0; native && q < world; ++q) in_order = in_order && comm[q] == q;
    return ScatterBlocks(tensor, [&](int) {
      if (in_order) return std::vector<Piece>{{0, 0, total}};
      std::vector<Piece> pieces;  // else at its communicator rank's place
      for (int q = 0; q < world; ++q) pieces.push_back({q * block, comm[q] * block, block});
      return pieces;
    });
  };
  ARD_RETURN_IF_ERROR(Begin());
  return Finish("allgather", run());
}

absl::Status GpuJob::Reducescatter(const GpuTensor& tensor, const std::vector<size_t>& blocks) {
  const int world = options_.world_ranks;
  ARD_RETURN_IF_ERROR(CheckReduction(tensor.meta.dtype, tensor.meta.op));  // that tensor's only
  if (static_cast<int>(blocks.size()) != world ||
      std::accumulate(blocks.begin(), blocks.end(), size_t{0}) != tensor.meta.count) {
    return absl::InternalError("reducescatter blocks do not partition the tensor");
  }
  const size_t elem = wire::DataTypeSize(static_cast<uint32_t>(tensor.meta.dtype));
  std::vector<size_t> first(world, 0);  // element where each rank's block starts
  for (int r = 1; r < world; ++r) first[r] = first[r - 1] + blocks[r - 1];
  const FusionLayout layout = PlanFusion({tensor.meta});
  auto run = [&]() -> absl::Status {
    ARD_RETURN_IF_ERROR(CheckTensor(tensor, Bytes(tensor.meta)));
    const std::vector<int> comm = CommRankOf();
    bool native = !HostExchange() && OneRankPerGpu(comm, options_.comm_size) &&
                  std::count(blocks.begin(), blocks.end(), blocks[0]) == world;
    for (int r = 0; native && r < world; ++r) native = comm[r] == r;
    if (!native) {
      ARD_RETURN_IF_ERROR(ReduceAll({tensor}, layout));
    } else {
      const size_t block_bytes = blocks[0] * elem;
      ARD_RETURN_IF_ERROR(EnsureFusion(layout.total_bytes));
      for (LocalGpu& gpu : gpus_) ARD_RETURN_IF_ERROR(Gather(gpu, {tensor}, layout));
      ARD_RETURN_IF_ERROR(Grouped("reducescatter", [&](LocalGpu& gpu) {
        return gpu.comm->ReduceScatter(gpu.fusion->data(),
                                       At(*gpu.fusion, gpu.comm->rank() * block_bytes), blocks[0],
                                       tensor.meta.dtype, tensor.meta.op, *gpu.stream);
      }));
      if (tensor.postscale != 1.0) {
        for (LocalGpu& gpu : gpus_) {
          GpuTensor own = tensor;
          own.meta.count = blocks[0];
          FusionLayout at;
          at.offsets = {gpu.comm->rank() * block_bytes};
          at.total_bytes = layout.total_bytes;
          ARD_RETURN_IF_ERROR(ScaleFusion(gpu, {own}, at, /*post=*/true));
        }
      }
    }
    return ScatterBlocks(tensor, [&](int rank) {
      return std::vector<Piece>{{0, first[rank] * elem, blocks[rank] * elem}};
    });
  };
  ARD_RETURN_IF_ERROR(Begin());
  return Finish("reducescatter", run());
}

absl::Status GpuJob::CheckTensor(const GpuTensor& tensor, size_t range_bytes) const {
  for (const LocalGpu& gpu : gpus_) {
    for (int rank : gpu.ranks) {
      if (InputOf(tensor, rank) == nullptr) {
        return absl::InternalError(absl::StrCat("local rank ", rank, " has no input"));
      }
    }
  }
  for (const GpuTensorInput& in : tensor.inputs) {
    auto it = view_.find(in.rank);
    if (it == view_.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("rank ", in.rank, " left while its GPU tensor was being reduced"));
    }
    if (in.event >= it->second.events.size() || in.offset > it->second.reg.arena_bytes ||
        range_bytes > it->second.reg.arena_bytes - in.offset) {
      return absl::InternalError(absl::StrCat("unchecked GPU input of rank ", in.rank));
    }
  }
  return absl::OkStatus();
}

// Copies each local rank's result out of its GPU's fusion buffer into its staging range
// (`pieces(rank)`: arena offset relative to the input, fusion offset, bytes), then records its
// event.
absl::Status GpuJob::ScatterBlocks(const GpuTensor& tensor,
                                   const std::function<std::vector<Piece>(int)>& pieces) {
  for (LocalGpu& gpu : gpus_) {
    for (int rank : gpu.ranks) {
      const GpuTensorInput* in = InputOf(tensor, rank);
      Rank& r = view_.at(rank);
      for (const Piece& p : pieces(rank)) {
        if (p.bytes == 0) continue;
        ARD_RETURN_IF_ERROR(device_.CopyAsync(At(*r.arena, in->offset + p.arena_offset),
                                              At(*gpu.fusion, p.fusion_offset), p.bytes,
                                              *gpu.stream));
      }
      ARD_RETURN_IF_ERROR(device_.Record(*r.events[in->event], *gpu.stream));
    }
  }
  return absl::OkStatus();
}

}  // namespace ard::gpu
