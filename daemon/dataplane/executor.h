// A job's executor (DESIGN.md "Threads"): one thread per job that runs the job's ready
// collectives in the order the control loop committed them, writes results into the job's result
// arena, announces new result segments and sends each rank its COMPLETE.
//
// Lifecycle: 1. constructed when the job forms (thread starts); 2. Enqueue() from the loop;
// 3. a failed job (JobContext::Fail) makes the executor complete remaining work with the failure;
// 4. Stop() completes queued work with the failure (or "shutting down") and joins the thread.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "daemon/dataplane/job_context.h"
#include "daemon/dataplane/local_collectives.h"
#include "daemon/negotiation/tensor_request.h"

namespace ard::dataplane {

class Executor {
 public:
  explicit Executor(std::shared_ptr<JobContext> job);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void Enqueue(negotiation::Response response);
  // A response this executor does not compute itself (a cross-host job's GPU tensors): `run`
  // executes it on the executor thread at its place in the committed order, so it may use the
  // job's TCP mesh (JobContext::mesh()); it must send every rank its COMPLETE. A failed job or a
  // shutdown completes it with the failure instead, as for any response.
  using Runner = std::function<void(const negotiation::Response&)>;
  void Enqueue(negotiation::Response response, Runner run);
  // Runs a small response on the calling thread (the control loop) when the executor thread has
  // nothing queued or running, saving a thread wake-up (~100 us here) on the latency path while
  // keeping the committed order. Returns false (and leaves `response` alone) otherwise.
  bool TryRunInline(negotiation::Response& response);
  void Stop();

  // Sends one rank its COMPLETE (error or result). Also used by the loop for requests that never
  // reach an executor (rejected submits, a failed job's waiting tensors).
  static void SendComplete(local::Session& session, const negotiation::TensorRequest& request,
                           const absl::Status& status, const RankResult* result,
                           int join_last_rank = -1);

 private:
  void Run();
  void Execute(const negotiation::Response& response);
  void Dispatch(const negotiation::Response& response, const Runner& run, bool stopping);
  void CompleteAll(const negotiation::Response& response, const absl::Status& status);
  absl::StatusOr<std::shared_ptr<shm::ResultSlot>> AllocateSlot(uint64_t bytes);

  const std::shared_ptr<JobContext> job_;
  absl::Mutex mu_;
  struct Item {
    negotiation::Response response;
    Runner run;  // empty: Execute()
  };
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // the thread is executing a response
  std::thread thread_;
};

}  // namespace ard::dataplane
