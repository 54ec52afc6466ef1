// The coordinator's half of cross-host jobs (DESIGN.md "Jobs", "Negotiation"): forms jobs whose
// ranks live on several daemons (JobFormation), runs each formed job's negotiation (ClusterJob:
// readiness table, validation, fusion, response cache, GPU layout, event streams), and aborts a
// job when one of its hosts reports a failure, goes DOWN, stops watching it (its WatchJob stream
// ends: its daemon exited), or a tensor stalls past stall_shutdown. Jobs that ended stay visible
// in Summaries for a while (JobHistory), and so do each elastic job's changes (generations
// formed, hosts waiting to join, generations lost or ended), shown on the job's newest entry.
// Every call about a formed job names its id and generation: an unknown id is NOT_FOUND, a
// generation other than the job's current one ABORTED ("stale generation").
// Elastic jobs (DESIGN.md "Elastic training"): a host outside the running generation that
// registers ranks for it is announced to the running hosts (JobEvent.hosts_updated) and its
// registration is held until their ranks re-register; the next generation forms with all.
//
// Thread: the control loop only. Handlers are called there (the rpc layer posts); event sinks
// are thread-safe (they write to gRPC streams).
// Lifecycle: 1. constructed by the Daemon on the coordinator (the stall inspection timer is
// scheduled then); 2. RegisterRanks calls wait until their job formed (or timed out); 3. Watch
// subscribes a host to its job's events (events made before it subscribed are kept for it);
// 4. a job ends when aborted or when every host left, and moves to the history; 5. Stop when the
// daemon shuts down; destroyed after the loop stopped (timers capture `this`).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/cluster/cluster_job.h"
#include "daemon/cluster/handlers.h"
#include "daemon/cluster/job_formation.h"
#include "daemon/cluster/job_history.h"
#include "daemon/common/event_loop.h"
#include "daemon/negotiation/fusion_planner.h"
#include "proto/common.pb.h"
#include "proto/negotiation.pb.h"

namespace ard::cluster {

struct JobCoordinatorOptions {
  uint64_t fusion_threshold_bytes = negotiation::kFusionThresholdBytesDefault;
  uint64_t id_prefix = 0;  // makes job ids unique across coordinator restarts
  absl::Duration stall_warning = absl::Seconds(60);
  size_t cache_capacity = 1024;  // response cache entries per job (Horovod's default)
  // A tensor stalled this long aborts its job with the stall report; zero: never.
  absl::Duration stall_shutdown = absl::ZeroDuration();
  // Whether a host is an UP member of the cluster (the membership table); calls from any other
  // host are refused. Empty: no check (tests).
  std::function<bool(const std::string&)> is_up;
  // Ended jobs shown in Summaries: the last this many, for at most this long.
  size_t ended_jobs_kept = JobHistory::kEndedJobsKept;
  absl::Duration ended_jobs_max_age = JobHistory::kEndedJobsMaxAge;
  // How long a host whose WatchJob stream ended may still report `left` (a follower ending
  // normally sends Negotiate(left) and then cancels its stream: the two may arrive either way
  // round) before its job is aborted.
  absl::Duration watch_end_grace = absl::Milliseconds(500);
};

class JobCoordinator {
 public:
  JobCoordinator(EventLoop& loop, JobCoordinatorOptions options);
  ~JobCoordinator();

  void HandleRegisterRanks(const RegisterRanksRequest& request, Done<RegisterRanksResponse> done);
  void HandleNegotiate(const NegotiateRequest& request, Done<NegotiateResponse> done);
  // Subscribes the request's host to its job's events; an unknown job or host is an error.
  absl::Status Watch(const WatchJobRequest& request, std::shared_ptr<JobEventSink> sink);
  // A host went DOWN or left: every job it takes part in is aborted, naming it.
  void OnHostDown(const std::string& host, const std::string& reason);
  // The rpc layer: the stream `sink` that Watch subscribed for `request` ended without the
  // coordinator ending it (the host cancelled it, or its connection broke: its daemon exited).
  // Unless that host reports `left` or a failure within watch_end_grace, its job is aborted,
  // naming it; long before the host would go DOWN for missed heartbeats.
  void OnWatchEnded(const WatchJobRequest& request, std::shared_ptr<JobEventSink> sink);
  // The daemon is stopping: streams that end from now on (its gRPC server cancels them) abort
  // nothing.
  void Stop() { stopping_ = true; }

  // The stall inspection (also run by the coordinator's own timer, every
  // max(50 ms, min(5 s, stall_warning / 4))): logs each newly stalled tensor once and aborts
  // jobs with a tensor stalled for stall_shutdown.
  void InspectStalls(absl::Time now);

  int job_count() const { return static_cast<int>(jobs_.size()); }

  // One summary per cross-host job: running ones (hosts, ranks per host, the tensors some ranks
  // have been waiting on for longer than stall_warning, naming the missing ranks and their hosts),
  // then the ended ones kept (state "failed" with the reason, or "ended"). No side effects.
  std::vector<JobSummary> Summaries() const;

 private:
  void OnFormed(const JobLayout& layout);
  // Elastic: records generation `layout` in the history (formed, grown, shrunk or re-formed).
  void RecordFormation(const JobLayout& layout);
  // The newest running generation of elastic job `name`, or null.
  ClusterJob* RunningElastic(const std::string& name);
  // The hosts of job `name`'s running generations that have not left them (for formation).
  std::set<std::string> RunningHosts(const std::string& name) const;
  // Elastic: `request` comes from a host outside the job's running generation: the running
  // hosts are told once (their ranks re-form at their next commit). A generation already at
  // the max_np the request gives refuses it (ResourceExhausted).
  absl::Status AnnounceJoining(const RegisterRanksRequest& request);
  void ScheduleStallInspection();
  // PermissionDenied unless `host` is an UP member of the cluster.
  absl::Status CheckMember(const std::string& host, const char* call) const;
  // The job `id`, checked for the caller: an UP member of the job, in the job's generation.
  absl::StatusOr<ClusterJob*> Find(uint64_t id, uint64_t generation, const std::string& host,
                                   const char* call);
  // Ends job `id` with an abort event to every host (state "failed" in the history).
  // `lost`: the host's NegotiateRequest.lost (an elastic generation re-forms), else "".
  void Abort(uint64_t id, const absl::Status& status, const std::string& lost = "");
  // Every host left: the job ends (state "ended" in the history).
  void End(uint64_t id);
  // The running job `id` of `generation`, if `sink` is still `host`'s stream of it and the host
  // has not left; else null.
  ClusterJob* WatchedBy(uint64_t id, uint64_t generation, const std::string& host,
                        const JobEventSink* sink);

  EventLoop& loop_;
  const JobCoordinatorOptions options_;
  JobFormation formation_;
  std::map<uint64_t, std::unique_ptr<ClusterJob>> jobs_;  // by job id
  JobHistory history_;
  bool stopping_ = false;
};

}  // namespace ard::cluster
