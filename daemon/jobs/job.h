// One job as this daemon holds it (DESIGN.md "Job lifecycle"): its local processes (members),
// its lifecycle (job_state.h), its readiness table, and the parts it composes: a negotiation
// strategy (LocalNegotiator on one host, CoordinatedNegotiator across hosts), an executor with
// the job's data planes (LocalCollective or TcpCollective for host memory, a GpuCollective once
// its ranks registered GPUs) and its GPU registrations. A tensor flows one way: a member's SUBMIT
// -> the readiness table -> the negotiator -> the executor's data plane -> COMPLETE.
//
// Thread: the control loop only; the executor thread shares only the JobContext.
// Lifecycle: 1. created by the JobRegistry at its first HELLO (forming; a formation timeout runs);
// 2. AddMember until every local rank registered, then the negotiator forms it (running,
// WELCOME to every member); 3. SUBMIT/GPU_REGISTER/RELEASE while running; 4. a failure (a
// member gone, the data plane, another host, stall shutdown) fails it (every member is told);
// 5. once no member is attached it ends: the executor stops, the registry's `on_finished` runs
// (posted) and the registry drops it.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/common/event_loop.h"
#include "daemon/dataplane/executor.h"
#include "daemon/dataplane/job_context.h"
#include "daemon/jobs/commit_road.h"
#include "daemon/jobs/elastic_generation.h"
#include "daemon/jobs/job_gpu.h"
#include "daemon/jobs/job_options.h"
#include "daemon/jobs/job_state.h"
#include "daemon/jobs/negotiator.h"
#include "daemon/local/frame_codec.h"
#include "daemon/local/session.h"
#include "daemon/negotiation/readiness_table.h"
#include "daemon/negotiation/stall_inspector.h"
#include "proto/common.pb.h"

namespace ard::dataplane::tcp {
class DataListener;
}  // namespace ard::dataplane::tcp

namespace ard::jobs {

// What every Job of a daemon shares (owned by the JobRegistry).
struct JobEnvironment {
  EventLoop& loop;
  const JobOptions& options;
  dataplane::tcp::DataListener* listener;  // Not owned; null: no cross-host jobs
  GpuProcesses* gpu;                       // Not owned; null: no GPU device
};

class Job : private NegotiationSink {
 public:
  // `local_size`: ranks expected on this host (= size on one host).
  Job(JobEnvironment env, uint32_t id, std::string name, int size, int local_size, uid_t uid,
      std::unique_ptr<Negotiator> negotiator, std::function<void()> on_finished);
  ~Job() override;
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::string& name() const { return name_; }
  uint32_t id() const { return id_; }
  uid_t uid() const { return uid_; }
  JobState state() const { return lifecycle_.state(); }
  // It failed (it stays so once every process left and it ended).
  bool failed() const { return lifecycle_.failed(); }
  bool cross_host() const { return local_size_ < size_; }
  bool elastic() const { return succession_.elastic(); }
  uint64_t generation() const { return lifecycle_.generation(); }
  // Some process of this job is still attached.
  bool attached() const { return connected() > 0; }
  bool formation_in_flight() const { return formation_in_flight_; }

  // Members that registered after the formation the coordinator formed from (an amendment came
  // too late): they join the next generation.
  using Rejoin = std::function<void(std::vector<std::shared_ptr<local::Session>>)>;
  // Elastic succession (job_elastic.cc; DESIGN.md "Elastic training"). Makes this (forming,
  // memberless) job elastic: it forms from the ranks present rather than a fixed size, succeeds
  // generation `previous_generation`, and a lost member re-forms it (reforming) instead of
  // failing it. Call once, before AddMember.
  void MakeElastic(ElasticSpec spec, uint64_t previous_generation, Rejoin rejoin);
  // Elastic, forming: forms now if ElasticGeneration::FormsNow says so; while the coordinator
  // holds its registration, amends it with the members that joined since.
  void MaybeFormElastic(const Predecessors& before);
  // Elastic, several hosts: a process may join this generation while its formation is in flight
  // (the registration is amended); on one host the formation answers at once.
  bool amends_formation() const { return elastic() && succession_.spec().coordinated; }
  // Elastic: the pids of the processes that will register for the next generation.
  std::set<uint32_t> ReturningPids() const;
  // Elastic: this generation ended to re-form (lost member, or ranks waiting to join).
  bool reform_pending() const { return succession_.reform_pending(); }
  // Elastic: ranks wait to join; every member is told (NOTIFY 0 kHostsUpdated) once it runs.
  void HostsUpdated();
  // Elastic: whether process `pid` may register for this job's next generation: not while this
  // generation runs with max_np ranks, unless it is one of them (ResourceExhausted; it would be
  // left out of the next one).
  absl::Status CheckRoom(pid_t pid) const;

  // HELLO: why this process cannot join (size or rank disagreement, not forming), or OK.
  absl::Status CheckHello(const wire::Hello& hello, int size) const;
  // Adds a registered process; forms the job once every local rank is here.
  void AddMember(const std::shared_ptr<local::Session>& s);
  void Submit(const std::shared_ptr<local::Session>& s, local::DecodedFrame frame);
  void GpuRegister(const std::shared_ptr<local::Session>& s, const local::DecodedFrame& frame);
  // GPU_UNREGISTER: releases the rank's GPU registration as its leaving would, then answers
  // GPU_UNREGISTERED (local_wire.h: the process may free its staging memory).
  void GpuUnregister(const std::shared_ptr<local::Session>& s, uint64_t request_id);
  void OnMemberClosed(const std::shared_ptr<local::Session>& s, bool graceful,
                      const std::string& why);
  // The formation timeout passed: if still forming, every member is told and detached.
  void FormTimeout();
  // Fails the job (first failure wins), or, elastic and running, ends this generation to re-form
  // (ElasticGeneration::OnLost). `tell_others`: also tell the other hosts.
  void Fail(const absl::Status& status, bool tell_others = true);
  // Stall inspector (timer): reports tensors some ranks have waited on too long; may fail the
  // job (stall shutdown).
  void InspectStalls(absl::Time now);
  // Pure: the summary `status` shows.
  JobSummary Summary(absl::Time now) const;
  // Daemon shutdown: fails the job and stops its executor.
  void Shutdown();

 private:
  // NegotiationSink
  void OnCommitted(negotiation::Response response) override;
  void OnJoinDone(const absl::Status& status, int last_rank) override;
  void OnFailedElsewhere(const absl::Status& status) override { Fail(status, false); }
  void OnHostsUpdated() override { HostsUpdated(); }

  void Form();
  // Fail; `daemon_stops`: the daemon shuts down, so even an elastic job fails.
  void FailOrReform(const absl::Status& status, bool tell_others, bool daemon_stops);
  // By rank: runs on this host (from formation).
  std::vector<bool> HereByRank() const;
  void OnFormed(absl::StatusOr<Formation> formation);
  // Elastic: takes this generation's size from `formation` and refuses the members it left out
  // (rank -1: more than max_np registered), dropping them from it and from members_. Fixed: no-op.
  void AdoptFormation(Formation& formation);
  // Why forming timed out (for the members).
  absl::Status FormTimeoutStatus() const;
  // The pids of the members (attached ones only if `attached_only`).
  std::vector<uint32_t> MemberPids(bool attached_only) const;
  // Forming failed (timeout, a rank left, no result arena): every member is told and detached.
  void AbandonForming(const absl::Status& status);
  // The job's GPU side, created at its first GPU frame (the registry lets GPU frames through only
  // on a daemon with a GPU device).
  JobGpu& Gpu();
  // `rank`'s process leaves the GPU side (GPU_UNREGISTER, BYE or a lost connection).
  void ReleaseGpu(int rank);
  void StartGpu(absl::StatusOr<gpu::CrossHostGpuPlan> plan);
  void FailGpuForming(const absl::Status& status);
  void EndIfDetached();
  int connected() const;
  // Runs `task` on the loop later, if this job still exists then.
  std::function<void()> Guarded(std::function<void()> task);

  const JobEnvironment env_;
  const uint32_t id_;  // this daemon's id of the job (the cluster's is the formation's job_id)
  const std::string name_;
  int size_;         // elastic: set at formation
  int local_size_;   // elastic: set at formation
  const uid_t uid_;  // of its first process: processes of other users cannot join it
  const absl::Time created_;
  const std::unique_ptr<Negotiator> negotiator_;
  const std::function<void()> on_finished_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  // Committed responses' one road into the executor; holds the job's timeline recorder (from
  // env_.options.timeline; null: none).
  CommitRoad road_;

  JobLifecycle lifecycle_;
  ElasticGeneration succession_;  // a fixed-size job: no bounds
  uint64_t cluster_job_id_ = 0;
  // Forming: in arrival order; then index = rank (null for ranks on other hosts). Sessions stay
  // listed after they close (so reports can name them) until the job is dropped.
  std::vector<std::shared_ptr<local::Session>> members_;
  std::vector<int> local_order_;      // this host's ranks by local rank (from formation)
  absl::Status departed_;             // a rank left cleanly: the job fails at the next submit
  bool pending_cap_logged_ = false;   // max_pending_tensors was hit (logged once)
  bool formation_in_flight_ = false;  // FormAsync was called and has not answered
  size_t registered_ = 0;             // the members the last FormAsync was given
  Rejoin rejoin_;                     // elastic
  negotiation::StallInspector stall_inspector_;

  std::shared_ptr<dataplane::JobContext> context_;      // from formation on
  std::unique_ptr<negotiation::ReadinessTable> table_;  // from formation on
  dataplane::TcpCollective* tcp_ = nullptr;             // Not owned (the executor's)
  std::unique_ptr<dataplane::Executor> executor_;       // from formation on
  std::unique_ptr<JobGpu> gpu_;                         // from the first GPU_REGISTER on
};

}  // namespace ard::jobs
