// How a job agrees with the rest of itself (DESIGN.md "Negotiation"), the negotiation strategy a
// Job composes: LocalNegotiator when every rank is on this host (decisions are local),
// CoordinatedNegotiator when ranks live on several hosts (the coordinator decides, through
// cluster::JobChannel). A strategy numbers the job's ranks at formation, turns tensors every
// local rank submitted into committed responses (in one order on every host), and plans the
// job's GPUs.
//
// Thread: the control loop only; `done` callbacks and the sink run there.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/dataplane/idle_rounds.h"
#include "daemon/dataplane/tcp_collective.h"
#include "daemon/gpu/gpu_plan.h"
#include "daemon/negotiation/committed_list.h"
#include "daemon/negotiation/tensor_request.h"

namespace ard::jobs {

// An elastic job's bounds (HELLO's elastic_min_np and size): min_np 0 = a fixed-size job.
struct ElasticSpec {
  int min_np = 0;
  int max_np = 0;            // 0: no bound
  bool coordinated = false;  // formed by the coordinator (a daemon with cross-host jobs)
  int first_local = 0;       // the launcher's local size: a new job's first generation waits for it
};

// One local process of a forming job, as registered (HELLO).
struct MemberInfo {
  int rank = -1;        // from the launcher, or -1 (elastic: the process's place in rank order)
  int local_rank = -1;  // from the launcher, or -1
  uint32_t pid = 0;
};

// A formed job, as this host sees it.
struct Formation {
  uint64_t job_id = 0;      // the cluster's id of a cross-host job; 0 on one host
  uint64_t generation = 0;  // the coordinator's generation of the job (JobLayout); 0 on one host
  // Per member, in the order given to FormAsync. -1: left out of an elastic generation (more
  // than max_np ranks registered; the job refuses the member). Fewer entries than the members
  // given: an amended formation formed from an earlier call's members (see FormAsync).
  std::vector<int> ranks;
  std::vector<int> local_ranks;  // per member (-1: left out)
  int local_size = 0;            // the members not left out
  // Several hosts: which host runs which rank (cross_size 1 on one host).
  dataplane::HostLayout hosts;
  std::vector<std::string> data_addresses;  // cross rank -> data-plane listener
  std::string data_secret;  // JobLayout.data_secret: the data plane's secret; never logged
};

// What the job learns from its negotiation while it runs (on the loop, in committed order).
class NegotiationSink {
 public:
  virtual ~NegotiationSink() = default;
  // A committed response with every taking-part rank's request (this host's with inputs).
  virtual void OnCommitted(negotiation::Response response) = 0;
  // A coordinator list (cross-host): its responses, committed in order.
  virtual void OnCommittedList(negotiation::CommittedList list) {
    for (negotiation::Response& response : list.responses) OnCommitted(std::move(response));
  }
  // Every rank joined (cross-host: the coordinator completed the join).
  virtual void OnJoinDone(const absl::Status& status, int last_rank) = 0;
  // The job failed elsewhere, or the negotiation itself broke: fail the job here without
  // telling the others again.
  virtual void OnFailedElsewhere(const absl::Status& status) = 0;
  // Elastic, several hosts: ranks of another host wait to join (the coordinator said so).
  virtual void OnHostsUpdated() {}
  // Cross-host: the coordinator's GPU layout arrived (after PlanGpusAsync's `done` ran), an event
  // of the stream every host receives in one order.
  virtual void OnGpuLayoutArrived() {}
};

class Negotiator {
 public:
  virtual ~Negotiator() = default;

  // Every local rank registered: numbers them (`done` may run before this returns). Elastic,
  // several hosts: called again before `done` ran (a process joined the forming generation), it
  // amends the formation, and only the last call's `done` runs, once, with the formation of the
  // members of whichever call the coordinator formed from (a prefix of the last call's members).
  virtual void FormAsync(const std::vector<MemberInfo>& members,
                         std::function<void(absl::StatusOr<Formation>)> done) = 0;
  // Formed: from now on the sink hears the job's decisions.
  virtual void Start(NegotiationSink* sink) = 0;
  // Tensors every local rank submitted (validated across this host's ranks).
  virtual void HostReady(std::vector<negotiation::Response> ready) = 0;
  // Some but not all local ranks submitted `name` (it waits in the readiness table): a hint for
  // the steady state, which may delay its vote for it (called once per tensor in that state).
  virtual void SubmittedPartly(const std::string& name) {}
  // A local rank joined (one host completes joins in its readiness table).
  virtual void Join(const negotiation::TensorRequest& join) = 0;
  // Every local rank registered its GPU (`host`: their devices, local rank order): plans the
  // job's GPU side with the other hosts. `done` runs once.
  virtual void PlanGpusAsync(const gpu::HostGpus& host,
                             std::function<void(absl::StatusOr<gpu::CrossHostGpuPlan>)> done) = 0;
  // The job failed here (the others are told) / every local rank left (the job ends).
  virtual void ReportFailure(const absl::Status& failure) = 0;
  // Elastic: the job's generation re-forms with `failure` because it lost `lost` (what the
  // coordinator's history shows). By default a failure like any other.
  virtual void ReportReform(const absl::Status& failure, const std::string& lost) {
    ReportFailure(failure);
  }
  virtual void ReportLeft() = 0;
  // Host-ready requests not committed yet; the job failed, so their ranks get the failure.
  virtual std::vector<negotiation::TensorRequest> TakeUncommitted() = 0;
  // The job's data plane exists (`tcp`: its cross-host collective, null on one host): the
  // readiness rounds its executor must take part in (SteadyNegotiator), else null.
  virtual dataplane::IdleRounds* StartRounds(dataplane::TcpCollective* tcp) { return nullptr; }
};

}  // namespace ard::jobs
