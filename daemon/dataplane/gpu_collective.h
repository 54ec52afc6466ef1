// The GPU data plane of a job (DESIGN.md "GPU path"): runs the job's committed GPU collectives
// (allreduce, broadcast, allgather, reducescatter) through its GpuJob, which owns the NCCL
// communicators; results stay in each rank's staging arena (RankResult carries only the shape),
// and the pool event the client recorded has been recorded again after them. Prepare initializes
// the communicators (every GPU of the job takes part). In hierarchical mode across hosts the
// GpuJob crosses hosts through the job's TcpCollective (same executor thread).
//
// Errors: input only this response's ranks got wrong (InvalidArgument, refused before any GPU
// work) fails those tensors; any other error aborts the GpuJob and fails the job, and every later
// GPU response fails with it. Run returns once the results are on the device (GpuJob's completion
// rule), so the executor's COMPLETE never reports a result that does not exist yet.
// Thread: see collective.h; job() is also used by the control loop for what GpuJob allows it
// (registration and input checks). Abort from any thread only raises GpuJob's flag; the executor
// thread aborts or finalizes the communicators (Run, Close).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "daemon/dataplane/collective.h"
#include "daemon/gpu/gpu_job.h"

namespace ard::dataplane {

class GpuCollective : public Collective {
 public:
  // `local_ranks[r]`: rank r submits on this host (its host feeds the others' inputs).
  GpuCollective(std::string job_name, std::vector<bool> local_ranks,
                std::unique_ptr<gpu::GpuJob> job, gpu::UniqueId id);

  gpu::GpuJob& job() { return *job_; }

  absl::Status Prepare() override;
  absl::Status Run(const negotiation::Response& response, const SlotAllocator& allocate,
                   std::vector<RankResults>* out, uint64_t* bytes_reduced) override;
  absl::Status JobFailure(const absl::Status& error) const override { return failed_; }
  void Abort(const absl::Status& why) override;
  void Close() override;

 private:
  absl::Status RunCollective(const negotiation::Response& response,
                             const std::vector<gpu::GpuTensor>& tensors,
                             std::vector<RankResults>* out);

  const std::string job_name_;
  const std::vector<bool> local_ranks_;
  const int size_;
  const std::unique_ptr<gpu::GpuJob> job_;
  const gpu::UniqueId id_;
  absl::Status failed_;  // executor thread: the GPU side failed (sticky)
};

}  // namespace ard::dataplane
