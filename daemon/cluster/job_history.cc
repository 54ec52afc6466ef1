#include "daemon/cluster/job_history.h"

#include <iterator>

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

void JobHistory::AddChange(const std::string& job, JobSummary::ElasticChange change,
                           absl::Time at) {
  for (auto it = changes_.begin(); it != changes_.end();) {  // jobs quiet for max_age go
    it = at - it->second.back().at > max_age_ ? changes_.erase(it) : std::next(it);
  }
  std::deque<Change>& kept = changes_[job];
  kept.push_back({std::move(change), at});
  while (kept.size() > kChangesKept) kept.pop_front();
}

std::vector<JobSummary::ElasticChange> JobHistory::Changes(const std::string& job,
                                                           absl::Time now) const {
  std::vector<JobSummary::ElasticChange> out;
  auto it = changes_.find(job);
  if (it == changes_.end() || now - it->second.back().at > max_age_) return out;
  for (const Change& c : it->second) {
    out.push_back(c.change);
    out.back().set_age_s(absl::ToDoubleSeconds(now - c.at));
  }
  return out;
}

const JobSummary::ElasticChange* JobHistory::LastFormation(const std::string& job) const {
  auto it = changes_.find(job);
  if (it == changes_.end()) return nullptr;
  for (auto c = it->second.rbegin(); c != it->second.rend(); ++c) {
    const std::string& what = c->change.change();
    if (what == "formed" || what == "grown" || what == "shrunk" || what == "re-formed") {
      return &c->change;
    }
  }
  return nullptr;
}

}  // namespace ard::cluster
