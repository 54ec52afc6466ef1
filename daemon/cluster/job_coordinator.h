// The coordinator's half of cross-host jobs (DESIGN.md "Jobs", "Negotiation"): forms jobs whose
// ranks live on several daemons (assigning ranks by host order, then local rank, unless the
// launcher gave them), runs the global readiness table of each job over all its ranks, validates
// across hosts, fuses, and streams one ordered list of responses to every host of the job. Aborts
// a job when one of its hosts reports a failure or goes DOWN.
//
// Thread: the control loop only. Handlers are called there (the rpc layer posts); event sinks
// are thread-safe (they write to gRPC streams).
// Lifecycle: 1. constructed by the Daemon on the coordinator; 2. RegisterRanks calls wait until
// their job formed (or timed out); 3. WatchJob subscribes a host to its job's events (events made
// before it subscribed are kept for it); 4. a job ends when aborted or when every host left.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/cluster/handlers.h"
#include "daemon/common/event_loop.h"
#include "daemon/negotiation/readiness_table.h"
#include "proto/common.pb.h"
#include "proto/negotiation.pb.h"

namespace ard::cluster {

// Where a host's job events go (a WatchJob stream). Thread-safe.
class JobEventSink {
 public:
  virtual ~JobEventSink() = default;
  virtual void Send(const JobEvent& event) = 0;
  // Ends the stream (after an abort event, or when the job is gone).
  virtual void Finish(const absl::Status& status) = 0;
};

struct JobCoordinatorOptions {
  uint64_t fusion_threshold_bytes = 128ull << 20;
  uint64_t id_prefix = 0;  // makes job ids unique across coordinator restarts
  absl::Duration stall_warning = absl::Seconds(60);
  size_t cache_capacity = 1024;  // response cache entries per job (Horovod's default)
  // A tensor stalled this long aborts its job with the stall report; zero: never.
  absl::Duration stall_shutdown = absl::ZeroDuration();
  // Whether a host is an UP member of the cluster (the membership table); calls from any other
  // host are refused. Empty: no check (tests).
  std::function<bool(const std::string&)> is_up;
};

class JobCoordinator {
 public:
  JobCoordinator(EventLoop& loop, JobCoordinatorOptions options);
  ~JobCoordinator();

  void HandleRegisterRanks(const RegisterRanksRequest& request, Done<RegisterRanksResponse> done);
  void HandleNegotiate(const NegotiateRequest& request, Done<NegotiateResponse> done);
  // Subscribes `host` to the job's events; an unknown job or host is an error.
  absl::Status Watch(uint64_t job_id, const std::string& host,
                     std::shared_ptr<JobEventSink> sink);
  // A host went DOWN or left: every job it takes part in is aborted, naming it.
  void OnHostDown(const std::string& host, const std::string& reason);

  int job_count() const { return static_cast<int>(jobs_.size()); }

  // One summary per cross-host job: its hosts, ranks per host and the tensors some ranks have
  // been waiting on for longer than stall_warning, naming the missing ranks and their hosts. Logs
  // each newly stalled tensor once; aborts jobs with a tensor stalled for stall_shutdown.
  std::vector<JobSummary> Summaries();

 private:
  struct Forming;
  struct Job;

  void TryForm(const std::string& name);
  void FormTimeout(const std::string& name, uint64_t generation);
  void Abort(uint64_t job_id, const absl::Status& status);
  // Aborts the job when a tensor still needs ranks of a host whose ranks all left (they exited
  // cleanly): it can never complete. True when aborted.
  bool AbortIfNeedsLeftHost(uint64_t job_id, Job& job);
  // GPU path: a host's GPUs (NegotiateRequest.gpu); once every host sent them, the GpuLayout goes
  // to all (JobEvent.gpu_layout). A second one, or one that does not match the layout, is refused.
  absl::Status CheckGpuHost(const Job& job, const std::string& host, const GpuHost& gpu) const;
  void AddGpuHost(Job& job, const std::string& host, const GpuHost& gpu);
  // PermissionDenied unless `host` is an UP member of the cluster.
  absl::Status CheckMember(const std::string& host, const char* call) const;
  void Broadcast(Job& job, const JobEvent& event);
  // Resolves a host's cached ids into metadata; false (job aborted) for an unknown id.
  bool Expand(uint64_t job_id, Job& job, const NegotiateRequest& request,
              std::vector<HostReadyTensor>* tensors);
  // Caches the names of `responses` that are not cached yet; records the decisions in `event`.
  void UpdateCache(Job& job, const std::vector<negotiation::Response>& responses, JobEvent* event);

  EventLoop& loop_;
  const JobCoordinatorOptions options_;
  uint64_t next_id_ = 1;
  std::map<std::string, std::unique_ptr<Forming>> forming_;  // by job name
  std::map<uint64_t, std::unique_ptr<Job>> jobs_;            // by job id
};

}  // namespace ard::cluster
