// The steady state as a negotiation strategy (DESIGN.md "Steady state without the coordinator"):
// a Negotiator that decorates the coordinated one of a cross-host job. Once the job's data plane
// exists it runs the job's readiness rounds (SteadyState, driven by the executor): host-ready
// tensors the rounds may agree on are held instead of sent to the coordinator, the
// coordinator's lists are held until a round releases them (at the same place on every host),
// and local joins and partly submitted tensors reach the rounds. Everything else passes through
// to the coordinated strategy, which never knows the rounds exist. Chosen by ChooseNegotiator
// when DaemonConfig.steady_state is on.
// Thread: the control loop (the rounds themselves run on the job's executor thread).
// Lifecycle: 1. FormAsync passes through and remembers which ranks run here; 2. Start: the
// central strategy's events come here first; 3. StartRounds with the job's TCP collective makes
// the rounds (none on one host); 4. failure: TakeUncommitted also returns what the rounds held.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "daemon/common/event_loop.h"
#include "daemon/jobs/job_options.h"
#include "daemon/jobs/negotiator.h"
#include "daemon/jobs/steady_state.h"

namespace ard::jobs {

class SteadyNegotiator : public Negotiator, private NegotiationSink {
 public:
  // `central`: the coordinated strategy it decorates (asked about everything the rounds do not
  // agree on).
  SteadyNegotiator(EventLoop& loop, const JobOptions& options, std::string job,
                   std::unique_ptr<Negotiator> central);

  void FormAsync(const std::vector<MemberInfo>& members,
                 std::function<void(absl::StatusOr<Formation>)> done) override;
  void Start(NegotiationSink* sink) override;
  void HostReady(std::vector<negotiation::Response> ready) override;
  void SubmittedPartly(const std::string& name) override;
  void Join(const negotiation::TensorRequest& join) override;
  void PlanGpusAsync(const gpu::HostGpus& host,
                     std::function<void(absl::StatusOr<gpu::CrossHostGpuPlan>)> done) override {
    central_->PlanGpusAsync(host, std::move(done));
  }
  void ReportFailure(const absl::Status& failure) override { central_->ReportFailure(failure); }
  void ReportReform(const absl::Status& failure, const std::string& lost) override {
    central_->ReportReform(failure, lost);
  }
  void ReportLeft() override { central_->ReportLeft(); }
  std::vector<negotiation::TensorRequest> TakeUncommitted() override;
  dataplane::IdleRounds* StartRounds(dataplane::TcpCollective* tcp) override;

 private:
  // NegotiationSink (the central strategy's events)
  void OnCommitted(negotiation::Response response) override;
  void OnCommittedList(negotiation::CommittedList list) override;
  void OnJoinDone(const absl::Status& status, int last_rank) override;
  void OnFailedElsewhere(const absl::Status& status) override;
  void OnHostsUpdated() override { sink_->OnHostsUpdated(); }
  void OnGpuLayoutArrived() override;

  EventLoop& loop_;
  const JobOptions& options_;
  const std::string job_;
  const std::unique_ptr<Negotiator> central_;
  NegotiationSink* sink_ = nullptr;      // Not owned; from Start
  std::vector<bool> here_;               // by rank: runs on this host (from formation)
  std::unique_ptr<SteadyState> steady_;  // once the data plane exists; null on one host
  int joins_pending_ = 0;                // local joins the coordinator has not completed
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ard::jobs
