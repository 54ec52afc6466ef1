#include "daemon/jobs/job_state.h"

#include "absl/strings/str_cat.h"

namespace ard::jobs {

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kForming: return "forming";
    case JobState::kRunning: return "running";
    case JobState::kReforming: return "reforming";
    case JobState::kFailed: return "failed";
    case JobState::kEnded: return "ended";
  }
  return "unknown";
}

absl::Status JobLifecycle::Advance(JobState next) {
  bool allowed = false;
  switch (state_) {
    case JobState::kForming:
    case JobState::kReforming:
      allowed = next == JobState::kRunning || next == JobState::kFailed || next == JobState::kEnded;
      break;
    case JobState::kRunning:
      allowed = next == JobState::kReforming || next == JobState::kFailed || next == JobState::kEnded;
      break;
    case JobState::kFailed:
      allowed = next == JobState::kEnded;
      break;
    case JobState::kEnded:
      break;
  }
  if (!allowed) {
    return absl::FailedPreconditionError(absl::StrCat("job cannot go from ", JobStateName(state_),
                                                      " to ", JobStateName(next)));
  }
  state_ = next;
  return absl::OkStatus();
}

absl::Status JobLifecycle::Formed() {
  if (state_ != JobState::kForming && state_ != JobState::kReforming) {
    return Advance(JobState::kRunning);  // refused with the reason
  }
  absl::Status s = Advance(JobState::kRunning);
  if (s.ok()) ++generation_;
  return s;
}

absl::Status JobLifecycle::Reform() { return Advance(JobState::kReforming); }

absl::Status JobLifecycle::Fail(const absl::Status& why) {
  if (why.ok()) return absl::InvalidArgumentError("a job fails with a reason");
  absl::Status s = Advance(JobState::kFailed);
  if (s.ok()) failure_ = std::string(why.message());
  return s;
}

absl::Status JobLifecycle::End() { return Advance(JobState::kEnded); }

}  // namespace ard::jobs
