// Job: what `allreducectl status` shows of it, and its stall inspector.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/common/logging.h"
#include "daemon/jobs/job.h"

namespace ard::jobs {

JobSummary Job::Summary(absl::Time now) const {
  JobSummary s;
  s.set_name(name_);
  s.set_size(size_);
  s.set_state(JobStateName(state()));
  s.add_hosts(options_.host_name);
  s.set_registered_ranks(members_.size());
  s.set_age_s(absl::ToDoubleSeconds(now - created_));
  s.set_failure(lifecycle_.failure());
  s.set_generation(lifecycle_.generation());
  JobSummary::HostRanks* ranks = s.add_ranks();
  ranks->set_host(options_.host_name);
  for (const auto& m : members_) {
    if (m == nullptr) continue;
    ranks->add_ranks(m->rank);
    ranks->add_pids(m->creds().pid);
  }
  if (gpu_ != nullptr && gpu_->any()) {  // GPU path: each rank's device (-1: not registered yet)
    for (const auto& m : members_) {
      if (m != nullptr) ranks->add_gpu_devices(gpu_->device_of(m->rank));
    }
  }
  s.set_job_id(cluster_job_id_);
  if (gpu_ != nullptr) s.set_gpu_plan(gpu_->plan());
  if (context_) {
    s.set_collectives_completed(context_->collectives_completed.load());
    s.set_bytes_reduced(context_->bytes_reduced.load());
  }
  if (table_) s.set_pending_tensors(table_->pending_tensors());
  for (const auto& stalled : stalled_) *s.add_stalled() = stalled;
  return s;
}

void Job::InspectStalls(absl::Time now) {
  stalled_.clear();
  if (state() != JobState::kRunning) return;
  std::string shutdown;
  for (const auto& w : table_->WaitingLongerThan(now, options_.stall_warning)) {
    JobSummary::StalledTensor t;
    t.set_name(w.name);
    t.set_waiting_s(absl::ToDoubleSeconds(w.waited));
    for (int r : w.submitted) t.add_submitted_ranks(r);
    std::vector<std::string> missing;
    for (int r : w.missing) {
      const double idle = absl::ToDoubleSeconds(now - members_[r]->last_activity);
      t.add_missing_ranks(r);
      t.add_missing_last_activity_s(idle);
      missing.push_back(absl::StrFormat("%d (pid %d, last active %.1fs ago)", r,
                                        members_[r]->creds().pid, idle));
    }
    if (stall_warned_.insert(w.name).second) {
      Logger("negotiation")
          ->warn("stalled tensor job={} tensor={} waiting_s={:.1f} missing_ranks=[{}] "
                 "submitted_ranks=[{}]",
                 name_, w.name, absl::ToDoubleSeconds(w.waited), absl::StrJoin(missing, ", "),
                 absl::StrJoin(w.submitted, ", "));
    }
    if (shutdown.empty() && options_.stall_shutdown > absl::ZeroDuration() &&
        w.waited >= options_.stall_shutdown) {
      shutdown = absl::StrCat("stall shutdown: tensor ", w.name, " waited ",
                              absl::FormatDuration(w.waited), " for ranks ",
                              absl::StrJoin(missing, ", "));
    }
    stalled_.push_back(std::move(t));
  }
  // Forget warnings for tensors that completed, so a later stall of the same name is reported.
  for (auto it = stall_warned_.begin(); it != stall_warned_.end();) {
    bool still = false;
    for (const auto& t : stalled_) still = still || t.name() == *it;
    it = still ? std::next(it) : stall_warned_.erase(it);
  }
  if (!shutdown.empty()) Fail(absl::AbortedError(shutdown));
}

}  // namespace ard::jobs
