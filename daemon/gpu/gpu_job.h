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
// back into each process's staging arena where its input was, and record the same pool event. A
// response of one unscaled tensor with one process per GPU skips the fusion buffer: the
// communicator reduces it in place in each process's staging range (no device-to-device copy). It
// returns once that work is done on the device (the completion rule: COMPLETE never reports a
// result that does not exist yet); the process's stream still waits on the event.
//
// Threads (DESIGN.md "GPU path"):
// - Control loop: RegisterRank, UnregisterRank, CheckInput, CheckReduction. They touch only the
//   registration table, under a short lock: never GPU work, never a collective.
// - The executor thread drives the communicators, streams and fusion buffers: Init, the
//   collectives, CheckHealth and Close, in that order. Only this thread calls a Communicator,
//   including Abort (NCCL frees a communicator on abort, under any other thread's call). Each
//   collective works on a snapshot of the registrations, whose shared mappings stay open until the
//   collective's work is done, whatever the control loop unregisters meanwhile.
// - Any thread: Abort(status) records the failure and raises a flag; the executor's waits and
//   entry checks obey it and abort the communicators themselves.
// Every wait polls, with a deadline (init_timeout for init, op_timeout after): past it the job
// fails with DeadlineExceeded naming this host.
//
// Lifecycle: 1. constructed when the job forms; 2. RegisterRank per local process; 3. Init(id);
// 4. collectives in committed order; 5. on failure the executor aborts the communicators (the
// job fails); 6. Close(): a healthy job finalizes them (ncclCommFinalize, polled) and destroys
// them, a failed one aborts them; 7. destruction (after the executor joined: the destroying thread
// then drives what Close did not end, and aborts it).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
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
  // Every wait after init (a collective's completion, a host-staged step, finalize).
  absl::Duration op_timeout = absl::Seconds(60);
  std::string host_name = "this host";  // for errors
  CrossHostReduce cross_host;           // kHierarchical with several hosts
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

  // Control loop. Bad input (wrong device, stale/foreign handle, ...) is that process's only.
  absl::Status RegisterRank(const GpuRegistration& registration);
  // Drops the rank's registration; a collective running keeps its mappings until its work is done.
  void UnregisterRank(int rank);
  // A submit's placement: InvalidArgument when it falls outside the rank's arena or names an
  // event outside its pool. Checked before the tensor is negotiated.
  absl::Status CheckInput(int rank, uint64_t offset, uint64_t bytes, uint32_t event) const;
  // Whether this job's GPU side can reduce `dtype` with `op` (InvalidArgument, per tensor, if not).
  absl::Status CheckReduction(wire::DataType dtype, wire::ReduceOp op) const;

  // Executor thread.
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
  // The job's end: finalizes and destroys the communicators while healthy, aborts them otherwise.
  void Close();
  uint64_t fusion_bytes() const;

  // Any thread: the job failed; the executor aborts the communicators at its next poll or call.
  void Abort(absl::Status status);
  absl::Status Failure() const;

 private:
  struct LocalGpu {
    int device = 0;
    std::unique_ptr<Stream> stream;
    std::unique_ptr<Memory> fusion;
    std::unique_ptr<Communicator> comm;
    std::vector<int> ranks;  // local job ranks on this GPU, ascending (the running snapshot's)
  };
  struct Rank {
    GpuRegistration reg;
    std::shared_ptr<Memory> arena;
    std::vector<std::shared_ptr<Event>> events;
  };

  // gpu_job_waits.cc: the executor's waits, communicator calls and teardown.
  absl::Status Await(const std::string& what, absl::Duration timeout,
                     const std::function<absl::StatusOr<bool>()>& done);
  absl::Status AwaitComms(const std::string& what, absl::Duration timeout);
  absl::Status AwaitStream(LocalGpu& gpu, const std::string& what);
  absl::Status AwaitStreams(const std::string& what);
  absl::Status Grouped(const std::string& what, const std::function<absl::Status(LocalGpu&)>& call);
  void AbortCommunicators();
  bool DrainStreams(absl::Duration timeout);
  absl::Status Begin();
  absl::Status Finish(const std::string& what, absl::Status status);

  absl::Status EnsureFusion(size_t bytes);
  // Page-locked host memory of the host-staged steps (scaling, several processes on a GPU, the
  // hierarchical exchange), so their copies are asynchronous on the job's stream; kept by the job
  // (growing like the fusion buffers) so a copy that a failed wait left on a stream never writes
  // into freed memory. Slot `slot`'s first `bytes` bytes.
  enum HostSlot { kSumBuffer, kPartBuffer, kScaleBuffer, kHostSlots };
  absl::StatusOr<char*> HostBuffer(HostSlot slot, size_t bytes);
  absl::Status Gather(LocalGpu& gpu, const std::vector<GpuTensor>& tensors,
                      const FusionLayout& layout);
  absl::Status Scatter(LocalGpu& gpu, const std::vector<GpuTensor>& tensors,
                       const FusionLayout& layout);
  absl::Status ReduceHierarchical(const FusionLayout& layout);
  absl::Status AllreduceRuns(const FusionLayout& layout, bool host_local);
  // Whether Allreduce can reduce `tensors` in place in the staging arenas; AllreduceInPlace does.
  bool InPlace(const std::vector<GpuTensor>& tensors) const;
  absl::Status AllreduceInPlace(const GpuTensor& tensor);
  // gpu_job_collectives.cc.
  bool HostExchange() const {
    return options_.mode == GpuMode::kHierarchical && options_.cross_host;
  }
  absl::Status ReduceAll(const std::vector<GpuTensor>& tensors, const FusionLayout& layout);
  absl::Status ScaleFusion(LocalGpu& gpu, const std::vector<GpuTensor>& tensors,
                           const FusionLayout& layout, bool post);
  std::vector<int> CommRankOf() const;
  absl::Status WaitInputs(LocalGpu& gpu, const GpuTensor& tensor);
  absl::Status GroupedBytesSum(size_t bytes);
  absl::Status HostCollective(const GpuTensor& tensor, size_t result_bytes,
                              const std::function<absl::Status(char* host)>& fill);
  absl::Status CheckTensor(const GpuTensor& tensor, size_t range_bytes) const;
  struct Piece {
    size_t arena_offset = 0;  // from the rank's input offset
    size_t fusion_offset = 0;
    size_t bytes = 0;
  };
  absl::Status ScatterBlocks(const GpuTensor& tensor,
                             const std::function<std::vector<Piece>(int rank)>& pieces);

  Device& device_;   // Not owned.
  IpcCache& cache_;  // Not owned.
  const GpuJobOptions options_;
  // The registrations (control loop writes; the executor snapshots them).
  mutable absl::Mutex mu_;
  std::map<int, Rank> ranks_ ABSL_GUARDED_BY(mu_);
  // Executor thread only.
  std::vector<LocalGpu> gpus_;
  std::map<int, Rank> view_;      // the running collective's snapshot of ranks_
  std::map<int, Rank> retained_;  // mappings a stream that never drained may still touch
  std::unique_ptr<Memory> host_[kHostSlots];
  // Any thread.
  mutable absl::Mutex failure_mu_;
  absl::Status failure_ ABSL_GUARDED_BY(failure_mu_);
  std::atomic<bool> stop_{false};  // failure_ is set: the executor's waits end
};

}  // namespace ard::gpu
