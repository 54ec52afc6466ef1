#include "daemon/jobs/commit_road.h"

#include "absl/time/clock.h"
#include "daemon/timeline/recorder.h"

namespace ard::jobs {

CommitRoad::CommitRoad(std::shared_ptr<timeline::Recorder> recorder)
    : recorder_(std::move(recorder)) {}

void CommitRoad::Open(std::shared_ptr<const dataplane::JobContext> job) { job_ = std::move(job); }

uint64_t CommitRoad::Admit(const negotiation::Response& response, dataplane::CommitOrigin origin) {
  if (origin == dataplane::CommitOrigin::kCentral && (job_ == nullptr || !job_->failure().ok())) {
    return 0;
  }
  const uint64_t group = groups_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (recorder_ != nullptr && recorder_->on()) {
    const absl::Time now = absl::Now();
    for (const auto& t : response.tensors) {
      recorder_->RecordAt(timeline::Mark::kCommit, -1, group, t.name, now);
    }
  }
  return group;
}

}  // namespace ard::jobs
