// The one road by which a job's committed responses enter its executor (DESIGN.md "Threads";
// dataplane/commit_gate.h): the negotiator's (Job::OnCommitted -> Executor::Commit, control loop)
// and the ones a readiness round released (executor thread) pass the same state check and get
// their place in the committed order, with the timeline's commit marks, here. Owned by the Job,
// which also records its pre-commit marks (submit, ready) through recorder().
//
// The state check: a central response the job hears of once it stopped running (failed,
// re-forming, ended) is dropped: its ranks got the failure when it stopped (TakeUncommitted). A
// released one was committed while the job ran (the round releases under the lock that the
// job's abort takes before it collects the unrun tensors), so it is admitted; if the job has
// failed meanwhile, the executor completes it with the failure.
//
// Thread: Open on the control loop before the executor exists; Admit on any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "daemon/dataplane/commit_gate.h"
#include "daemon/dataplane/job_context.h"

namespace ard::timeline {
class Recorder;
}  // namespace ard::timeline

namespace ard::jobs {

class CommitRoad : public dataplane::CommitGate {
 public:
  // `recorder`: the job's timeline recorder (null: no timeline).
  explicit CommitRoad(std::shared_ptr<timeline::Recorder> recorder);

  const std::shared_ptr<timeline::Recorder>& recorder() const { return recorder_; }
  // The job formed: its state from now on is `job`'s failure (OK: running).
  void Open(std::shared_ptr<const dataplane::JobContext> job);

  uint64_t Admit(const negotiation::Response& response, dataplane::CommitOrigin origin) override;

 private:
  const std::shared_ptr<timeline::Recorder> recorder_;
  std::shared_ptr<const dataplane::JobContext> job_;  // from Open
  std::atomic<uint64_t> groups_{0};                   // responses committed so far
};

}  // namespace ard::jobs
