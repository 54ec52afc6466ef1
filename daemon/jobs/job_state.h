// A job's lifecycle (DESIGN.md "Job lifecycle") as pure logic: its state, its generation and why
// it failed. Every transition goes through Advance, which refuses the ones the diagram does not
// have, so a Job cannot, say, run again after it failed.
//
//   forming --formed--> running --lost a member (elastic)--> reforming --re-formed--> running
//      |                   |                                     |
//      +------failed-------+---------------failed----------------+--> failed --all gone--> ended
//      +------all gone-----+--------------all gone---------------+--------------------------^
//
// The generation numbers a job's formations: 0 while it first forms, 1 once it runs; a
// re-formation (elastic) starts generation g+1. Messages and events of a job carry (job id,
// generation); those of an older generation are refused.
// Value type; the owning Job's thread (the control loop).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace ard::jobs {

enum class JobState { kForming, kRunning, kReforming, kFailed, kEnded };

const char* JobStateName(JobState state);

class JobLifecycle {
 public:
  // `generation`: that of the job this one succeeds (an elastic job's next generation), else 0.
  explicit JobLifecycle(uint64_t generation = 0) : generation_(generation) {}
  JobState state() const { return state_; }
  uint64_t generation() const { return generation_; }
  // Why it failed (kFailed, and kEnded after a failure); empty otherwise.
  const std::string& failure() const { return failure_; }
  bool failed() const { return !failure_.empty(); }

  // forming or reforming -> running (generation + 1: 1 for a new job).
  absl::Status Formed();
  // running -> reforming: members were lost and the job re-forms with those left (elastic).
  absl::Status Reform();
  // forming, running or reforming -> failed, with the reason (a non-OK status).
  absl::Status Fail(const absl::Status& why);
  // Any state but ended -> ended: no process of the job is attached any more.
  absl::Status End();

 private:
  absl::Status Advance(JobState next);

  JobState state_ = JobState::kForming;
  uint64_t generation_ = 0;
  std::string failure_;
};

}  // namespace ard::jobs
