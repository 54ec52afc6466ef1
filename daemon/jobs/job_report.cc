// Job: what `allreducectl status` shows of it, and its stall inspector.
#include "absl/strings/str_cat.h"
#include "daemon/jobs/job.h"

namespace ard::jobs {

JobSummary Job::Summary(absl::Time now) const {
  JobSummary s;
  s.set_name(name_);
  s.set_size(size_);
  s.set_state(JobStateName(state()));
  s.add_hosts(env_.options.host_name);
  s.set_registered_ranks(members_.size());
  s.set_age_s(absl::ToDoubleSeconds(now - created_));
  s.set_failure(lifecycle_.failed() ? lifecycle_.failure() : succession_.reform_reason());
  s.set_generation(lifecycle_.generation());
  JobSummary::HostRanks* ranks = s.add_ranks();
  ranks->set_host(env_.options.host_name);
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
  for (const auto& stalled : stall_inspector_.last()) *s.add_stalled() = stalled;
  return s;
}

void Job::InspectStalls(absl::Time now) {
  if (state() != JobState::kRunning) return stall_inspector_.Forget();
  auto report = stall_inspector_.Inspect(
      name_, table_->WaitingLongerThan(now, env_.options.stall_warning), now,
      {env_.options.stall_warning, env_.options.stall_shutdown}, [&](int r) {
        return negotiation::MissingRank{"", static_cast<uint32_t>(members_[r]->creds().pid),
                                        members_[r]->last_activity};
      });
  if (report.shutdown) Fail(absl::AbortedError(*report.shutdown));
}

}  // namespace ard::jobs
