// The data-plane seam (STYLE.md "Seams"): how one job's committed responses are computed for this
// host's ranks. Implementations side by side: LocalCollective (every rank on this host, through
// shared memory), TcpCollective (ranks on several hosts: local reduction, then the job's TCP mesh
// between daemons) and GpuCollective (GPU tensors: NCCL, optionally the TCP mesh between hosts).
// The job composes one host-memory collective and, once its ranks registered their GPUs, a GPU
// one; the Executor runs whichever the response's memory needs, without knowing which it is.
//
// Thread: Prepare and Run on the job's executor thread only; Abort from any thread.
// Lifecycle: 1. constructed by the job at formation (or GPU registration); 2. Prepare() once on
// the executor thread (connect the mesh, initialize communicators); 3. Run() per committed
// response, in the committed order; 4. Abort() makes a Run blocked on peers return at once;
// 5. Close() on the executor thread when it stops.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/common/heap_optional.h"
#include "daemon/negotiation/tensor_request.h"
#include "daemon/shm/result_arena.h"

namespace ard::dataplane {

// One rank's result of one tensor.
struct RankResult {
  std::shared_ptr<shm::ResultSlot> slot;  // null when the result has no bytes (or stays on a GPU)
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;  // alltoall: rows from each rank; allgather: rows of each rank
};

// One tensor's results, indexed by rank (one entry per rank of the job); absent for a rank with
// no result here (another host's, or one not taking part, or a collective that returns no
// data): an absent entry costs a pointer, so a large job's tensor does not pay a RankResult
// (64 bytes) for every rank of the job.
using RankResults = std::vector<HeapOptional<RankResult>>;

// A result's shape when it is the input's (allreduce, broadcast).
inline std::vector<int64_t> ShapeOf(const wire::Submit& m) {
  return std::vector<int64_t>(m.shape, m.shape + m.ndims);
}

// When the cross-host part of a Run began and ended (the timeline's "cross-host transfer").
struct TransferSpan {
  absl::Time start = absl::InfinitePast();  // InfinitePast: no cross-host part
  absl::Time end = absl::InfinitePast();
  void Begin() {
    if (start == absl::InfinitePast()) start = absl::Now();
  }
  void End() { end = absl::Now(); }
};

using SlotAllocator = std::function<absl::StatusOr<std::shared_ptr<shm::ResultSlot>>(uint64_t)>;

class Collective {
 public:
  virtual ~Collective() = default;

  // Once, before the first Run. An error (already worded for the user) fails the job.
  virtual absl::Status Prepare() { return absl::OkStatus(); }

  // Computes every tensor of `response` for this host's ranks: (*out)[i][rank] for tensor i and
  // every local rank that takes part (absent: a result with no bytes and no shape).
  // `*bytes_reduced` grows by one rank's input bytes per tensor. A group is atomic: an error fails
  // every tensor of the response.
  virtual absl::Status Run(const negotiation::Response& response, const SlotAllocator& allocate,
                           std::vector<RankResults>* out, uint64_t* bytes_reduced) = 0;

  // After Run returned `error`: OK when only that response's tensors were wrong (the job goes
  // on); otherwise why the job cannot go on (this data plane is unusable), worded for the user.
  virtual absl::Status JobFailure(const absl::Status& error) const = 0;

  // How long to wait, after a job-ending failure here, for the job's real cause to arrive from
  // elsewhere (another host's failure, told through the coordinator) before reporting this one.
  virtual absl::Duration cause_grace() const { return absl::ZeroDuration(); }

  // Whether a response of `bytes` may run inline on the control loop (no peers to wait for).
  virtual bool RunsInline(uint64_t bytes) const { return false; }

  // Executor thread, after Run: the cross-host part of that Run (none by default).
  virtual TransferSpan last_transfer() const { return {}; }

  // Any thread: a Run waiting for peers returns promptly with an error.
  virtual void Abort(const absl::Status& why) {}

  // Executor thread, its last call here (the executor is stopping): release what only this thread
  // may release (GPU communicators: finalized after a normal end, aborted after a failure).
  virtual void Close() {}
};

}  // namespace ard::dataplane
