// A job's executor (DESIGN.md "Threads"): one thread per job that runs the job's committed
// responses in the committed order through the job's data planes (collective.h: one for host
// memory, and one for GPU memory once the job's ranks registered their GPUs), writes results into
// the job's result arena, and announces new result segments and sends each rank its COMPLETE
// through the job's CompletionSink (completion_sink.h). It does
// not know which data planes it drives (one host, several hosts, GPUs).
//
// Every committed response passes the job's CommitGate (commit_gate.h) once, whichever road it
// came by: Commit() from the loop, or a readiness round's release on the executor thread.
//
// Lifecycle: 1. constructed when the job forms, with its host-memory collective and its gate
// (thread starts and runs its Prepare first); 2. Commit() and AttachGpu() from the loop, in
// committed order; 3. a failed job (JobContext::Fail) makes the executor complete remaining work
// with the failure; with IdleRounds (steady state), the executor takes part in readiness rounds
// whenever nothing is queued, and runs what each round releases at once;
// 4. Abort() (any thread) makes a collective blocked on peers return; 5. Stop() aborts, completes
// queued work with the failure (or "shutting down") and joins the thread.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "daemon/dataplane/collective.h"
#include "daemon/dataplane/commit_gate.h"
#include "daemon/dataplane/idle_rounds.h"
#include "daemon/dataplane/job_context.h"
#include "daemon/negotiation/tensor_request.h"

namespace ard::dataplane {

class Executor {
 public:
  // `gate` and `rounds` (not owned; `rounds` may be null) outlive the executor.
  Executor(std::shared_ptr<JobContext> job, std::unique_ptr<Collective> host, CommitGate& gate,
           IdleRounds* rounds = nullptr);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // The loop's road for a committed response: past the gate (CommitOrigin::kCentral), then run
  // inline (RunsInline below) or queued.
  void Commit(negotiation::Response response);
  // The job's GPU data plane, prepared on the executor thread at this place in the committed
  // order; responses with GPU tensors run through it from then on. `gpu` stays alive (for the
  // loop's raw pointer) until the executor is destroyed. With rounds, it is held until a
  // response with attach_gpu runs (released by a round, or enqueued once the rounds ended), so
  // its Prepare (NCCL init across hosts) has the same place in every host's order.
  void AttachGpu(std::unique_ptr<Collective> gpu);
  // Any thread: the job failed or ended; collectives waiting for peers return at once.
  void Abort(const absl::Status& why);
  void Stop();

 private:
  struct Item {
    negotiation::Response response;
    std::unique_ptr<Collective> attach_gpu;  // set: attach it instead of running `response`
    uint64_t group = 0;                      // the timeline's group: committed order, from 1
  };

  // Runs a small host-memory response on the calling thread (the control loop) when the
  // executor thread has nothing queued or running and the data plane allows it (no peers),
  // saving a thread wake-up (~100 us here) on the latency path while keeping the committed order.
  // Returns false (and leaves `response` alone) otherwise.
  bool TryRunInline(negotiation::Response& response, uint64_t group);

  void Run();
  // Idle with rounds: waits for a round (or new work) and runs it. False once the rounds failed.
  bool IdleRound();
  void Wake();
  void Dispatch(Item& item, bool stopping);
  void Execute(const negotiation::Response& response, uint64_t group);
  void CompleteAll(const negotiation::Response& response, const absl::Status& status);
  absl::StatusOr<std::shared_ptr<shm::ResultSlot>> AllocateSlot(uint64_t bytes);

  const std::shared_ptr<JobContext> job_;
  const std::unique_ptr<Collective> host_;
  CommitGate& gate_;    // Not owned (the job's)
  IdleRounds* rounds_;  // Not owned; null without the steady state; null again once failed
  int wakeup_fd_ = -1;  // eventfd: new work or stopping, with rounds
  absl::Mutex mu_;
  std::unique_ptr<Collective> gpu_ ABSL_GUARDED_BY(mu_);       // written on the executor thread
  std::unique_ptr<Collective> held_gpu_ ABSL_GUARDED_BY(mu_);  // with rounds: until attach_gpu
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // a response is executing (thread or inline)
  std::thread thread_;
};

}  // namespace ard::dataplane
