// The jobs of this daemon (DESIGN.md "Jobs, ranks and membership"): maps job names to Jobs and
// routes every decoded frame from local clients to its process's job. HELLO creates a job (one
// host: LocalNegotiator; ranks on several hosts: CoordinatedNegotiator) or adds the process to
// the forming one; SUBMIT, GPU_REGISTER and a client leaving go to the job; ADD_SEGMENT and
// RELEASE concern the process alone (the frame routing: job_registry_frames.cc). Also runs the
// stall inspector's timer and collects the job summaries `status` shows.
//
// Thread: the control loop only (no locks).
// Lifecycle: 1. constructed by the Daemon with the loop; 2. Start() schedules the stall
// inspector; 3. frames and closes arrive from the LocalSocketServer; a Job that ended is dropped
// (posted), a single-host one into the history of ended jobs; 4. Shutdown() fails every job
// ("daemon shutting down") and joins the executors.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/cluster/job_history.h"
#include "daemon/cluster/negotiation_client.h"
#include "daemon/common/event_loop.h"
#include "daemon/dataplane/tcp/data_listener.h"
#include "daemon/jobs/job.h"
#include "daemon/jobs/job_options.h"
#include "daemon/jobs/succession.h"
#include "daemon/local/local_socket_server.h"
#include "proto/common.pb.h"

namespace ard::jobs {

class JobRegistry : public local::SessionHandler {
 public:
  JobRegistry(EventLoop& loop, JobOptions options);
  ~JobRegistry() override;

  void Start() { ScheduleStallInspection(); }
  // Called (on the loop) once the GPU device's context became unusable, after every job here
  // failed with `status` (a gpu::StickyError naming the cause): the daemon exits.
  void OnGpuLost(std::function<void(const absl::Status& status)> f) { on_gpu_lost_ = std::move(f); }
  void Shutdown();
  // Enables cross-host jobs: `coordinator` reaches the coordinator's Negotiation service (this
  // daemon's own JobCoordinator on the coordinator), `listener` accepts other hosts' data
  // connections.
  void EnableCrossHost(cluster::NegotiationClient* coordinator,
                       dataplane::tcp::DataListener* listener, std::string data_address) {
    coordinator_ = coordinator;
    listener_ = listener;
    data_address_ = std::move(data_address);
  }

  void OnFrame(const std::shared_ptr<local::Session>& session, local::DecodedFrame frame,
               int fd) override;
  void OnClosed(const std::shared_ptr<local::Session>& session, bool graceful,
                const std::string& why) override;

  // This host is cut off from the cluster (the coordinator dropped it): fails every running
  // cross-host job with `status`.
  void FailCrossHostJobs(const absl::Status& status);

  // The job named `name` on this host, or null (for `allreducectl abort`).
  Job* Find(const std::string& name) {
    auto it = jobs_.find(name);
    return it == jobs_.end() ? nullptr : it->second.get();
  }

  // For status: one summary per job on this host. Pure.
  std::vector<JobSummary> Summaries() const;
  // For status and `allreducectl jobs`: this host's single-host jobs that ended or failed
  // (cross-host ones are the coordinator's history), oldest first. Pure.
  std::vector<JobSummary> EndedSummaries() const { return ended_.Summaries(absl::Now()); }

 private:
  // HELLO (one admission for fixed and elastic jobs, hello_admission.h), the process's input
  // segment, then the job it joins (fixed: the forming one or a new one; elastic: the forming
  // generation, or the next one: the running generation retires into the succession).
  void HandleHello(const std::shared_ptr<local::Session>& s, const wire::Hello& hello, int fd);
  Job* NewJob(const std::string& name, int size, int local_size, uid_t uid, ElasticSpec spec);
  Job* JobOf(const local::Session& s);
  // Every job here: current ones and retired generations.
  void ForEachJob(const std::function<void(Job&)>& f);
  void Drop(const std::string& name, uint32_t id);
  // A single-host job that ended goes to ended_ ("failed" if it failed before its processes left).
  void RecordEnded(const Job& job);
  // Forms `name`'s forming elastic generation once the settle window passed, polling (once per
  // name) while it still waits.
  void TryFormSettled(const std::string& name);
  // Elastic: process `s` (its `job` set) joins the forming generation of its job, or a new one
  // (Succession::Join); also for members an amended formation formed without (Job::Rejoin).
  void JoinElastic(const std::shared_ptr<local::Session>& s, const ElasticSpec& spec);
  void TryFormPolling(const std::string& name, bool polled);
  void ScheduleStallInspection();
  // The GPU device's sticky error, once: fails every job and calls on_gpu_lost_.
  void InspectGpu();

  EventLoop& loop_;
  const JobOptions options_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;  // by name
  Succession succession_;                             // earlier generations of elastic jobs
  cluster::JobHistory ended_;                         // single-host jobs that ended
  uint32_t next_job_id_ = 1;
  cluster::NegotiationClient* coordinator_ = nullptr;  // Not owned; null: single-host jobs only.
  dataplane::tcp::DataListener* listener_ = nullptr;   // Not owned.
  std::string data_address_;
  bool shut_down_ = false;
  bool gpu_lost_ = false;
  std::function<void(const absl::Status&)> on_gpu_lost_;
  std::set<std::string> polling_;      // names with a TryFormPolling posted
  std::unique_ptr<GpuProcesses> gpu_;  // GPU path: with a device only
};

}  // namespace ard::jobs
