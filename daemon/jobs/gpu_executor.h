// A job's GPU executor (DESIGN.md "GPU path"): one thread per job with GPU ranks that initializes
// the job's communicators (GpuJob::Init) and then runs the job's committed GPU collectives
// (allreduce, broadcast, allgather, reducescatter) through GpuJob in the order the control loop
// enqueued them, sending each rank its COMPLETE (bytes 0: the result is in the rank's staging
// arena, and the pool event the client recorded has been recorded again after it). CPU tensors of
// the same job keep going through dataplane::Executor.
//
// Lifecycle: 1. constructed by the JobRegistry once every local rank registered its GPU (thread
// starts, Init first); 2. Enqueue() from the loop; 3. a failure (Init, a collective, an
// asynchronous communicator error) aborts the GpuJob and is reported once through `on_failure`
// (from the executor thread; the loop then fails the job); queued and later work completes with the
// job's failure; 4. Stop() aborts what is left and joins the thread.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "daemon/dataplane/job_context.h"
#include "daemon/gpu/gpu_job.h"
#include "daemon/negotiation/tensor_request.h"

namespace ard::jobs {

class GpuExecutor {
 public:
  GpuExecutor(std::shared_ptr<dataplane::JobContext> context, std::unique_ptr<gpu::GpuJob> job,
              gpu::UniqueId id, std::function<void(absl::Status)> on_failure);
  ~GpuExecutor();
  GpuExecutor(const GpuExecutor&) = delete;
  GpuExecutor& operator=(const GpuExecutor&) = delete;

  gpu::GpuJob& job() { return *job_; }
  void Enqueue(negotiation::Response response);
  // Cross-host jobs: runs a committed GPU response on the calling thread (the job's data-plane
  // executor, which owns the TCP mesh hierarchical mode crosses hosts on, and keeps one committed
  // order for the job's CPU and GPU responses), after waiting for Init. Never mixed with Enqueue.
  void ExecuteOnCaller(const negotiation::Response& response);
  void Stop();

 private:
  void Run();
  void Execute(const negotiation::Response& response);
  absl::Status Run(const negotiation::Response& response,
                   const std::vector<gpu::GpuTensor>& tensors,
                   std::vector<std::vector<std::vector<int64_t>>>* shapes);
  void CompleteAll(const negotiation::Response& response, const absl::Status& status);
  void Fail(const absl::Status& status);

  const std::shared_ptr<dataplane::JobContext> context_;
  const std::unique_ptr<gpu::GpuJob> job_;
  const gpu::UniqueId id_;
  const std::function<void(absl::Status)> on_failure_;
  absl::Mutex mu_;
  std::deque<negotiation::Response> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool initialized_ ABSL_GUARDED_BY(mu_) = false;  // Init returned (either way)
  // The thread that executes (this executor's, or ExecuteOnCaller's caller after Init): the GPU
  // side failed (reported once).
  absl::Status failed_;
  std::thread thread_;
};

}  // namespace ard::jobs
