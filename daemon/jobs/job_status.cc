// JobRegistry's reporting half: job summaries for `allreducectl status` and the stall inspector.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/common/logging.h"
#include "daemon/jobs/job_registry.h"
#include "daemon/jobs/local_job.h"

namespace ard::jobs {
namespace {

const char* StateName(LocalJob::State s) {
  switch (s) {
    case LocalJob::State::kForming: return "forming";
    case LocalJob::State::kRunning: return "running";
    case LocalJob::State::kFailed: return "failed";
  }
  return "unknown";
}

}  // namespace

std::vector<JobSummary> JobRegistry::Summaries() const {
  std::vector<JobSummary> out;
  const absl::Time now = absl::Now();
  for (const auto& [name, job] : jobs_) {
    JobSummary s;
    s.set_name(name);
    s.set_size(job->size);
    s.set_state(StateName(job->state));
    s.add_hosts(options_.host_name);
    s.set_registered_ranks(job->members.size());
    s.set_age_s(absl::ToDoubleSeconds(now - job->created));
    s.set_failure(job->failure);
    JobSummary::HostRanks* ranks = s.add_ranks();
    ranks->set_host(options_.host_name);
    for (const auto& m : job->members) {
      if (m == nullptr) continue;
      ranks->add_ranks(m->rank);
      ranks->add_pids(m->creds().pid);
    }
    if (!job->gpu_regs.empty()) {  // GPU path: each rank's device (-1: not registered yet)
      for (const auto& m : job->members) {
        if (m == nullptr) continue;
        auto reg = job->gpu_regs.find(m->rank);
        ranks->add_gpu_devices(reg == job->gpu_regs.end() ? -1 : reg->second.device);
      }
    }
    s.set_job_id(job->layout.job_id());
    s.set_gpu_plan(job->gpu_plan);
    if (job->context) {
      s.set_collectives_completed(job->context->collectives_completed.load());
      s.set_bytes_reduced(job->context->bytes_reduced.load());
    }
    if (job->table) s.set_pending_tensors(job->table->pending_tensors());
    for (const auto& stalled : job->stalled) *s.add_stalled() = stalled;
    out.push_back(std::move(s));
  }
  return out;
}

void JobRegistry::InspectStalls() {
  const absl::Time now = absl::Now();
  std::vector<LocalJob*> to_abort;
  for (auto& [name, job] : jobs_) {
    job->stalled.clear();
    if (job->state != LocalJob::State::kRunning) continue;
    for (const auto& w : job->table->WaitingLongerThan(now, options_.stall_warning)) {
      JobSummary::StalledTensor t;
      t.set_name(w.name);
      t.set_waiting_s(absl::ToDoubleSeconds(w.waited));
      for (int r : w.submitted) t.add_submitted_ranks(r);
      std::vector<std::string> missing;
      for (int r : w.missing) {
        const double idle = absl::ToDoubleSeconds(now - job->members[r]->last_activity);
        t.add_missing_ranks(r);
        t.add_missing_last_activity_s(idle);
        missing.push_back(absl::StrFormat("%d (pid %d, last active %.1fs ago)", r,
                                          job->members[r]->creds().pid, idle));
      }
      if (job->stall_warned.insert(w.name).second) {
        Logger("negotiation")
            ->warn("stalled tensor job={} tensor={} waiting_s={:.1f} missing_ranks=[{}] "
                   "submitted_ranks=[{}]",
                   name, w.name, absl::ToDoubleSeconds(w.waited), absl::StrJoin(missing, ", "),
                   absl::StrJoin(w.submitted, ", "));
      }
      const bool abort = options_.stall_shutdown > absl::ZeroDuration() &&
                         w.waited >= options_.stall_shutdown;
      if (abort && (to_abort.empty() || to_abort.back() != job.get())) {
        to_abort.push_back(job.get());
        job->failure = absl::StrCat("stall shutdown: tensor ", w.name, " waited ",
                                    absl::FormatDuration(w.waited), " for ranks ",
                                    absl::StrJoin(missing, ", "));
      }
      job->stalled.push_back(std::move(t));
    }
    // Forget warnings for tensors that completed, so a later stall of the same name is reported.
    for (auto it = job->stall_warned.begin(); it != job->stall_warned.end();) {
      bool still = false;
      for (const auto& t : job->stalled) still = still || t.name() == *it;
      it = still ? std::next(it) : job->stall_warned.erase(it);
    }
  }
  for (LocalJob* job : to_abort) FailJob(*job, absl::AbortedError(job->failure));
}

}  // namespace ard::jobs
