#include "daemon/cluster/job_coordinator.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/duration_format.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"

namespace ard::cluster {

JobCoordinator::JobCoordinator(EventLoop& loop, JobCoordinatorOptions options)
    : loop_(loop),
      options_(std::move(options)),
      formation_(
          loop, options_.id_prefix, [this](const JobLayout& l) { OnFormed(l); },
          [this](const std::string& name) { return RunningHosts(name); }),
      history_(options_.ended_jobs_kept, options_.ended_jobs_max_age) {
  ScheduleStallInspection();
}

JobCoordinator::~JobCoordinator() {
  for (auto& [id, job] : jobs_) job->Finish(absl::UnavailableError("coordinator shutting down"));
}

void JobCoordinator::ScheduleStallInspection() {
  // Often enough that a stall is reported within a quarter of stall_warning of its threshold.
  const absl::Duration every =
      std::max(absl::Milliseconds(50), std::min(absl::Seconds(5), options_.stall_warning / 4));
  loop_.PostAfter(every, [this] {
    InspectStalls(absl::Now());
    ScheduleStallInspection();
  });
}

absl::Status JobCoordinator::CheckMember(const std::string& host, const char* call) const {
  if (!options_.is_up || options_.is_up(host)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(call, " from host '",
                                                  absl::CHexEscape(host.substr(0, 64)),
                                                  "', which is not an UP member of the cluster"));
}

void JobCoordinator::HandleRegisterRanks(const RegisterRanksRequest& request,
                                         Done<RegisterRanksResponse> done) {
  if (absl::Status s = CheckMember(request.host(), "RegisterRanks"); !s.ok()) return done(s);
  if (request.elastic_min_np() > 0) {
    if (absl::Status s = AnnounceJoining(request); !s.ok()) return done(s);
  }
  formation_.Register(request, std::move(done));
}

ClusterJob* JobCoordinator::RunningElastic(const std::string& name) {
  if (formation_.elastic(name) == nullptr) return nullptr;
  ClusterJob* newest = nullptr;
  for (auto& [id, job] : jobs_) {
    if (job->layout().job() == name &&
        (newest == nullptr || job->generation() > newest->generation())) {
      newest = job.get();
    }
  }
  return newest;
}

std::set<std::string> JobCoordinator::RunningHosts(const std::string& name) const {
  std::set<std::string> out;
  for (const auto& [id, job] : jobs_) {
    if (job->layout().job() != name) continue;
    for (const auto& h : job->layout().hosts()) {
      if (job->Active(h.name())) out.insert(h.name());
    }
  }
  return out;
}

absl::Status JobCoordinator::AnnounceJoining(const RegisterRanksRequest& request) {
  ClusterJob* running = RunningElastic(request.job());
  if (running == nullptr || running->HasHost(request.host())) return absl::OkStatus();
  if (request.size() > 0 && running->layout().size() >= request.size()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("elastic job ", request.job(), " runs ", running->layout().size(),
                     " ranks, its max_np: the ", request.ranks_size(), " rank(s) of host ",
                     request.host(), " cannot join it"));
  }
  if (running->AnnounceHostsUpdated()) {
    Logger("negotiation")
        ->info(
            "elastic job has a new host waiting to join job={} id={} generation={} host={} "
            "ranks={}",
            request.job(), running->id(), running->generation(), request.host(),
            request.ranks_size());
  }
  JobSummary::ElasticChange change;  // every joining host, even once the ranks were told
  change.set_change("hosts updated");
  change.set_generation(running->generation());
  change.set_size(request.ranks_size());
  change.add_hosts(request.host());
  history_.AddChange(request.job(), std::move(change), absl::Now());
  return absl::OkStatus();
}

void JobCoordinator::OnFormed(const JobLayout& layout) {
  jobs_[layout.job_id()] = std::make_unique<ClusterJob>(layout, options_.fusion_threshold_bytes,
                                                        options_.cache_capacity, absl::Now());
  if (formation_.elastic(layout.job()) != nullptr) RecordFormation(layout);
}

void JobCoordinator::RecordFormation(const JobLayout& layout) {
  JobSummary::ElasticChange change;
  change.set_generation(layout.generation());
  change.set_size(layout.size());
  std::set<std::string> hosts;
  for (const auto& h : layout.hosts()) {
    change.add_hosts(h.name());
    hosts.insert(h.name());
  }
  const JobSummary::ElasticChange* last = history_.LastFormation(layout.job());
  if (last == nullptr) {
    change.set_change("formed");
  } else {
    const int before_size = static_cast<int>(last->size());
    change.set_change(layout.size() > before_size   ? "grown"
                      : layout.size() < before_size ? "shrunk"
                                                    : "re-formed");
    const std::set<std::string> before(last->hosts().begin(), last->hosts().end());
    std::vector<std::string> moved;
    for (const std::string& h : hosts) {
      if (before.count(h) == 0) moved.push_back("+" + h);
    }
    for (const std::string& h : before) {
      if (hosts.count(h) == 0) moved.push_back("-" + h);
    }
    change.set_detail(absl::StrJoin(moved, " "));
  }
  history_.AddChange(layout.job(), std::move(change), absl::Now());
}

absl::StatusOr<ClusterJob*> JobCoordinator::Find(uint64_t id, uint64_t generation,
                                                 const std::string& host, const char* call) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    if (const JobSummary* ended = history_.Find(id)) {
      return absl::NotFoundError(
          absl::StrCat("job ", ended->name(), " (id ", id, ") has ", ended->state(),
                       ended->failure().empty() ? "" : absl::StrCat(": ", ended->failure())));
    }
    return absl::NotFoundError(absl::StrCat("unknown or ended job id ", id));
  }
  ClusterJob& job = *it->second;
  ARD_RETURN_IF_ERROR(CheckMember(host, call));
  if (!job.HasHost(host)) {
    return absl::PermissionDeniedError(
        absl::StrCat("host ", host, " is not part of job ", job.layout().job()));
  }
  if (generation != job.generation()) {
    return absl::AbortedError(absl::StrCat("stale generation ", generation, " of job ",
                                           job.layout().job(), " (id ", id,
                                           "): its current generation is ", job.generation()));
  }
  return &job;
}

void JobCoordinator::HandleNegotiate(const NegotiateRequest& request,
                                     Done<NegotiateResponse> done) {
  absl::StatusOr<ClusterJob*> job =
      Find(request.job_id(), request.generation(), request.host(), "Negotiate");
  if (!job.ok()) return done(job.status());
  ClusterJob::Outcome outcome = (*job)->Negotiate(request, absl::Now());
  if (outcome.reply.ok()) {
    done(NegotiateResponse());
  } else {
    done(outcome.reply);
  }
  if (!outcome.abort.ok()) {
    Abort(request.job_id(), outcome.abort, request.lost());
  } else if ((*job)->ended()) {
    End(request.job_id());
  } else if (request.left()) {
    formation_.OnRunningChanged((*job)->layout().job());
  }
}

absl::Status JobCoordinator::Watch(const WatchJobRequest& request,
                                   std::shared_ptr<JobEventSink> sink) {
  absl::StatusOr<ClusterJob*> job =
      Find(request.job_id(), request.generation(), request.host(), "WatchJob");
  if (!job.ok()) return job.status();
  return (*job)->Watch(request.host(), std::move(sink));
}

void JobCoordinator::OnHostDown(const std::string& host, const std::string& reason) {
  std::vector<uint64_t> doomed;
  for (const auto& [id, job] : jobs_) {
    if (job->Active(host)) doomed.push_back(id);
  }
  for (uint64_t id : doomed) {
    Abort(id, absl::UnavailableError(absl::StrCat("host ", host, " is DOWN (", reason, ")")));
  }
  formation_.OnHostDown(host);
}

ClusterJob* JobCoordinator::WatchedBy(uint64_t id, uint64_t generation, const std::string& host,
                                      const JobEventSink* sink) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return nullptr;
  ClusterJob& job = *it->second;
  if (job.generation() != generation || !job.Active(host) || !job.WatchedBy(host, sink)) {
    return nullptr;
  }
  return &job;
}

void JobCoordinator::OnWatchEnded(const WatchJobRequest& request,
                                  std::shared_ptr<JobEventSink> sink) {
  // Ended, aborted, or left (the host's ranks are done): nothing to do.
  if (stopping_ || !WatchedBy(request.job_id(), request.generation(), request.host(), sink.get())) {
    return;
  }
  Logger("negotiation")
      ->debug("watch stream ended id={} host={}; waiting {} for its left", request.job_id(),
              request.host(), FormatDurationShort(options_.watch_end_grace));
  // `sink` is held until then, so it cannot be confused with a later stream at its address.
  loop_.PostAfter(options_.watch_end_grace, [this, request, sink = std::move(sink)] {
    if (stopping_) return;
    ClusterJob* job = WatchedBy(request.job_id(), request.generation(), request.host(), sink.get());
    if (job == nullptr) return;  // it left, or the job ended or was aborted meanwhile
    Abort(request.job_id(),
          absl::UnavailableError(absl::StrCat("host ", request.host(), " stopped watching job ",
                                              job->layout().job(),
                                              " (its daemon exited or lost the coordinator)")));
  });
}

void JobCoordinator::InspectStalls(absl::Time now) {
  std::vector<std::pair<uint64_t, std::string>> doomed;
  for (auto& [id, job] : jobs_) {
    if (auto report = job->InspectStalls(now, {options_.stall_warning, options_.stall_shutdown})) {
      doomed.emplace_back(id, *std::move(report));
    }
  }
  for (const auto& [id, report] : doomed) Abort(id, absl::AbortedError(report));
}

void JobCoordinator::Abort(uint64_t id, const absl::Status& status, const std::string& lost) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  ClusterJob& job = *it->second;
  Logger("negotiation")
      ->warn("cross-host job aborted job={} id={} error=\"{}\"", job.layout().job(), id,
             status.message());
  const absl::Time now = absl::Now();
  JobSummary summary = job.Summary(now, options_.stall_warning);
  summary.set_state("failed");
  summary.set_failure(std::string(status.message()));
  summary.set_pending_tensors(0);
  summary.clear_stalled();
  job.Abort(status);
  history_.Add(std::move(summary), now);
  const std::string name = job.layout().job();
  if (formation_.elastic(name) != nullptr) {
    // A host whose generation re-forms says what it lost (NegotiateRequest.lost).
    JobSummary::ElasticChange change;
    change.set_change("lost");
    change.set_generation(job.generation());
    change.set_detail(lost.empty() ? std::string(status.message()) : lost);
    history_.AddChange(name, std::move(change), now);
  }
  jobs_.erase(it);
  formation_.OnRunningChanged(name);
}

void JobCoordinator::End(uint64_t id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  ClusterJob& job = *it->second;
  Logger("negotiation")->info("cross-host job ended job={} id={}", job.layout().job(), id);
  const absl::Time now = absl::Now();
  JobSummary summary = job.Summary(now, options_.stall_warning);
  summary.set_state("ended");
  summary.clear_stalled();
  job.Finish(absl::OkStatus());
  history_.Add(std::move(summary), now);
  const std::string name = job.layout().job();
  if (formation_.elastic(name) != nullptr) {
    JobSummary::ElasticChange change;
    change.set_change("ended");
    change.set_generation(job.generation());
    change.set_detail("every host left");
    history_.AddChange(name, std::move(change), now);
  }
  jobs_.erase(it);
  formation_.OnRunningChanged(name);
}

std::vector<JobSummary> JobCoordinator::Summaries() const {
  const absl::Time now = absl::Now();
  std::vector<JobSummary> out;
  for (const auto& [id, job] : jobs_) out.push_back(job->Summary(now, options_.stall_warning));
  for (JobSummary& s : history_.Summaries(now)) out.push_back(std::move(s));
  // Each elastic job's bounds and changes go on its newest entry (the highest generation).
  std::map<std::string, size_t> newest;
  for (size_t i = 0; i < out.size(); ++i) {
    if (formation_.elastic(out[i].name()) == nullptr) continue;
    auto [it, fresh] = newest.emplace(out[i].name(), i);
    if (!fresh && out[i].generation() > out[it->second].generation()) it->second = i;
  }
  for (const auto& [name, i] : newest) {
    const ElasticBounds* bounds = formation_.elastic(name);
    out[i].set_elastic_min_np(bounds->min_np);
    out[i].set_elastic_max_np(bounds->max_np);
    for (JobSummary::ElasticChange& c : history_.Changes(name, now)) {
      *out[i].add_elastic_changes() = std::move(c);
    }
  }
  return out;
}

}  // namespace ard::cluster
