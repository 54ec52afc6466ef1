#include "daemon/jobs/succession.h"

#include <algorithm>

namespace ard::jobs {

Job* Succession::Join(std::map<std::string, std::unique_ptr<Job>>& jobs, const std::string& name,
                      const std::function<Job*(uint64_t previous)>& start) {
  auto it = jobs.find(name);
  uint64_t previous = 0;
  if (it != jobs.end() &&
      (it->second->state() != JobState::kForming ||
       (it->second->formation_in_flight() && !it->second->amends_formation()))) {
    // The generation that runs (or re-forms) stays until its processes detach; the new one
    // forms after that. One being formed by the coordinator is joined (its registration amended).
    previous = Retire(std::move(it->second));
    jobs.erase(it);
    it = jobs.end();
  }
  if (it != jobs.end()) return it->second.get();
  // The last generation here may have ended already (its processes left before this one came).
  return start(std::max(previous, Handoff(name, absl::Now())));
}

void Succession::TryForm(Job* job) {
  if (job == nullptr || !job->elastic()) return;
  job->MaybeFormElastic(Before(job->name()));
  if (job->state() != JobState::kForming || job->formation_in_flight()) {
    Formed(job->name());  // the successor formed (or is forming) with those present
  }
}

uint64_t Succession::Retire(std::unique_ptr<Job> job) {
  const uint64_t generation = job->generation();
  job->HostsUpdated();
  retired_.push_back(std::move(job));
  return generation;
}

uint64_t Succession::Handoff(const std::string& name, absl::Time now) {
  auto it = handoffs_.find(name);
  if (it == handoffs_.end()) return 0;
  if (now - it->second.at > form_timeout_) {
    handoffs_.erase(it);
    return 0;
  }
  return it->second.generation;
}

Predecessors Succession::Before(const std::string& name) const {
  Predecessors before;
  before.settle = settle_;
  for (const auto& job : retired_) {
    if (job->name() == name) before.attached = before.attached || job->attached();
  }
  auto it = handoffs_.find(name);
  if (it != handoffs_.end()) {
    before.left = it->second.at;
    for (uint32_t pid : it->second.returning) {
      if (alive_(pid)) before.returning.insert(pid);
    }
  }
  return before;
}

void Succession::Ended(const Job& job) {
  if (!job.elastic() || !job.reform_pending()) return;
  Expected& h = handoffs_[job.name()];
  h.generation = std::max(h.generation, job.generation());
  const std::set<uint32_t> pids = job.ReturningPids();
  h.returning.insert(pids.begin(), pids.end());
  h.at = absl::Now();
}

bool Succession::Drop(uint32_t id) {
  const size_t before = retired_.size();
  retired_.erase(std::remove_if(retired_.begin(), retired_.end(),
                                [id](const auto& job) { return job->id() == id; }),
                 retired_.end());
  return retired_.size() != before;
}

Job* Succession::Find(uint32_t id) {
  for (auto& job : retired_) {
    if (job->id() == id) return job.get();
  }
  return nullptr;
}

void Succession::ForEach(const std::function<void(Job&)>& f) {
  for (auto& job : retired_) f(*job);
}

void Succession::ForEach(const std::function<void(const Job&)>& f) const {
  for (const auto& job : retired_) f(*job);
}

}  // namespace ard::jobs
