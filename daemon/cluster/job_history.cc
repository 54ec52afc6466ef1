#include "daemon/cluster/job_history.h"

namespace ard::cluster {

void JobHistory::Add(JobSummary summary, absl::Time ended) {
  if (capacity_ == 0) return;
  summary.set_duration_s(summary.age_s());
  ended_.push_back({std::move(summary), ended});
  while (ended_.size() > capacity_ ||
         (!ended_.empty() && ended - ended_.front().ended > max_age_)) {
    ended_.pop_front();
  }
}

const JobSummary* JobHistory::Find(uint64_t job_id) const {
  for (const Ended& e : ended_) {
    if (e.summary.job_id() == job_id) return &e.summary;
  }
  return nullptr;
}

std::vector<JobSummary> JobHistory::Summaries(absl::Time now) const {
  std::vector<JobSummary> out;
  for (const Ended& e : ended_) {
    if (now - e.ended > max_age_) continue;
    out.push_back(e.summary);
    out.back().set_age_s(e.summary.age_s() + absl::ToDoubleSeconds(now - e.ended));
  }
  return out;
}

}  // namespace ard::cluster
