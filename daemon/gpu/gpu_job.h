// A job's GPU data plane on this host (DESIGN.md "GPU path"): the job's communicator ranks (one per
// local GPU), a stream and a fusion buffer per GPU, and each local process's staging arena and
// event pool (opened through the IpcCache). Written against gpu::Device, so CI runs it on the host
// test double.
//
// Modes: kNccl — one communicator spans every GPU of the job on every host (ncclUniqueId from the
// cluster). kHierarchical — the communicator spans this host's GPUs only; an allreduce reduces
// within the host, crosses hosts through `CrossHostReduce` (the TCP data plane) from a host
// buffer, and is broadcast back to every local GPU.
//
// Per fused allreduce (Allreduce): on each GPU's stream, wait for each process's "input ready"
// event, copy its inputs into the fusion buffer at PlanFusion's offsets (several processes on one
// GPU are reduced through host memory first), one grouped communicator call per run, copy results
// back into each process's staging arena where its input was, and record the same pool event; the
// caller then sends COMPLETE and the process makes its stream wait on that event. The host never
// waits for the GPU on this path (except host-staged steps: several processes per GPU, and
// hierarchical mode's host exchange).
//
// Lifecycle: 1. constructed when the job forms; 2. RegisterRank per local process (control loop);
// 3. Init(id) on the executor thread; 4. Allreduce/Broadcast in committed order from the executor
// thread; CheckHealth() between them; 5. Abort(status) from any thread fails the job's
// communicators at once; later calls fail with that status; 6. UnregisterRank when a process
// leaves. Threads: RegisterRank/UnregisterRank/CheckInput and the executor's calls are serialized
// by an internal mutex (registration is rare); Abort is callable concurrently.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/gpu/device.h"
#include "daemon/gpu/fusion_layout.h"
#include "daemon/gpu/ipc_cache.h"

namespace ard::gpu {

enum class GpuMode { kNccl, kHierarchical };

// Hierarchical mode: allreduce `count` elements at `buf` (host memory) with the other hosts.
using CrossHostReduce =
    std::function<absl::Status(void* buf, size_t count, wire::DataType dtype, wire::ReduceOp op)>;

struct GpuJobOptions {
  GpuMode mode = GpuMode::kNccl;
  int world_ranks = 1;                      // processes in the job (Average divides by this)
  int comm_size = 1;                        // ranks of the communicator
  std::vector<CommRank> local_comm_ranks;   // this host's ranks of it, one per local GPU
  uint64_t initial_fusion_bytes = 1 << 20;  // per GPU; grows to the largest fused response
  absl::Duration init_timeout = absl::Seconds(60);
  CrossHostReduce cross_host;  // kHierarchical with several hosts
  // kNccl across hosts: the communicator rank of every job rank's GPU (index = job rank), the
  // same on every host, or empty. Known, it lets broadcast/allgather/reducescatter use the native
  // NCCL calls; empty, they go through an allreduce (every host must agree, so set it on all or
  // none). A single-host job derives it from its registrations.
  std::vector<int> comm_rank_of;
};

// One process's GPU registration (sent once by the client).
struct GpuRegistration {
  int rank = 0;  // job rank
  uint32_t pid = 0;
  int device = 0;
  IpcHandle arena{};
  uint64_t arena_bytes = 0;
  std::vector<IpcHandle> events;
};

// One tensor of a fused allreduce: where each local rank's input lies and which pool event it
// recorded after copying it there.
struct GpuTensorInput {
  int rank = 0;
  uint64_t offset = 0;  // in that rank's staging arena
  uint32_t event = 0;   // pool index
};
struct GpuTensor {
  FusionTensor meta;
  std::vector<GpuTensorInput> inputs;  // every local rank of the job
  // Allreduce/reducescatter: each input is multiplied by prescale first, the result by postscale
  // last (as for host tensors). Applied in host memory (NCCL has no scale op): 1.0 skips it.
  double prescale = 1.0;
  double postscale = 1.0;
};

class GpuJob {
 public:
  GpuJob(Device& device, IpcCache& cache, GpuJobOptions options);
  ~GpuJob();

  // Bad input (wrong device, stale/foreign handle, ...) is returned to that process only.
  absl::Status RegisterRank(const GpuRegistration& registration);
  // Waits for the job's issued GPU work to finish (abort first to cut it short), then drops the
  // rank's mappings.
  void UnregisterRank(int rank);
  // A submit's placement: InvalidArgument when it falls outside the rank's arena or names an
  // event outside its pool. Checked before the tensor is negotiated.
  absl::Status CheckInput(int rank, uint64_t offset, uint64_t bytes, uint32_t event) const;

  absl::Status Init(const UniqueId& id);
  absl::Status Allreduce(const std::vector<GpuTensor>& tensors);
  // The other collectives, one tensor each; every result is written in place at each local rank's
  // input offset and its input event recorded again, as for Allreduce. Byte-exact data movement
  // for any dtype.
  // Broadcast: `tensor.meta.count` elements of job rank `root`'s input to every rank.
  absl::Status Broadcast(const GpuTensor& tensor, int root);
  // Allgather: every rank contributes `tensor.meta.count` elements (equal first dimensions);
  // each rank receives world_ranks * count elements in rank order, so its staging range must hold
  // world_ranks times its input (the client reserves that).
  absl::Status Allgather(const GpuTensor& tensor);
  // Reducescatter: `tensor.meta.count` elements reduced (with pre/postscale); job rank r receives
  // block r, `blocks[r]` elements starting at the sum of the blocks before it (world_ranks blocks).
  absl::Status Reducescatter(const GpuTensor& tensor, const std::vector<size_t>& blocks);
  // Polls every communicator's asynchronous error; aborts the job on the first one.
  absl::Status CheckHealth();
  void Abort(absl::Status status);

  uint64_t fusion_bytes() const;

 private:
  struct LocalGpu {
    int device = 0;
    std::unique_ptr<Stream> stream;
    std::unique_ptr<Memory> fusion;
    std::unique_ptr<Communicator> comm;
    std::vector<int> ranks;  // local job ranks on this GPU, ascending
  };
  struct Rank {
    GpuRegistration reg;
    std::shared_ptr<Memory> arena;
    std::vector<std::shared_ptr<Event>> events;
  };

  absl::Status Failure() const;
  absl::Status EnsureFusion(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Gather(LocalGpu& gpu, const std::vector<GpuTensor>& tensors,
                      const FusionLayout& layout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Scatter(LocalGpu& gpu, const std::vector<GpuTensor>& tensors,
                       const FusionLayout& layout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Reduce(const FusionLayout& layout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReduceHierarchical(const FusionLayout& layout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AllreduceRuns(const FusionLayout& layout, bool host_local)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // gpu_job_collectives.cc.
  absl::Status Ready() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HostExchange() const {
    return options_.mode == GpuMode::kHierarchical && options_.cross_host;
  }
  absl::Status ReduceAll(const std::vector<GpuTensor>& tensors, const FusionLayout& layout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ScaleFusion(LocalGpu& gpu, const std::vector<GpuTensor>& tensors,
                           const FusionLayout& layout, bool post)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<int> CommRankOf() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status WaitInputs(LocalGpu& gpu, const GpuTensor& tensor)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SyncAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status GroupedBytesSum(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status HostCollective(const GpuTensor& tensor, size_t result_bytes,
                              const std::function<absl::Status(std::vector<char>&)>& fill)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Finish(absl::Status status);
  absl::Status CheckTensor(const GpuTensor& tensor, size_t range_bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct Piece {
    size_t arena_offset = 0;  // from the rank's input offset
    size_t fusion_offset = 0;
    size_t bytes = 0;
  };
  absl::Status ScatterBlocks(const GpuTensor& tensor,
                             const std::function<std::vector<Piece>(int rank)>& pieces)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Device& device_;   // Not owned.
  IpcCache& cache_;  // Not owned.
  const GpuJobOptions options_;
  mutable absl::Mutex mu_;
  std::vector<LocalGpu> gpus_ ABSL_GUARDED_BY(mu_);
  std::map<int, Rank> ranks_ ABSL_GUARDED_BY(mu_);
  mutable absl::Mutex failure_mu_;
  absl::Status failure_ ABSL_GUARDED_BY(failure_mu_);
  std::vector<Communicator*> comms_ ABSL_GUARDED_BY(failure_mu_);  // for Abort from any thread
};

}  // namespace ard::gpu
