// The negotiation strategy of a job whose ranks live on several hosts (negotiator.h): the
// coordinator forms the job and commits its tensors, reached through cluster::JobChannel (the
// one interface to it). This host numbers its own local ranks (the launcher's kept, the rest by
// arrival), keeps each host-ready tensor's local inputs until the coordinator commits it, and
// adds them to the committed response, so the data a tensor needs flows one way: job ->
// negotiation -> data plane.
// Thread: the control loop.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "daemon/cluster/job_channel.h"
#include "daemon/jobs/job_options.h"
#include "daemon/jobs/negotiator.h"

namespace ard::jobs {

class CoordinatedNegotiator : public Negotiator, private cluster::JobChannelSink {
 public:
  CoordinatedNegotiator(EventLoop& loop, cluster::NegotiationClient& coordinator,
                        const JobOptions& options, std::string data_address, std::string job,
                        int size, int local_size, ElasticSpec elastic = {});

  void FormAsync(const std::vector<MemberInfo>& members,
                 std::function<void(absl::StatusOr<Formation>)> done) override;
  void Start(NegotiationSink* sink) override;
  void HostReady(std::vector<negotiation::Response> ready) override;
  void Join(const negotiation::TensorRequest& join) override;
  void PlanGpusAsync(const gpu::HostGpus& host,
                     std::function<void(absl::StatusOr<gpu::CrossHostGpuPlan>)> done) override;
  void ReportFailure(const absl::Status& failure) override { channel_.ReportFailure(failure); }
  void ReportReform(const absl::Status& failure, const std::string& lost) override {
    channel_.ReportFailure(failure, lost);
  }
  void ReportLeft() override { channel_.ReportLeft(); }
  std::vector<negotiation::TensorRequest> TakeUncommitted() override;

 private:
  // The coordinator answered registration `amendment` (of the members with `local_ranks`):
  // FormAsync's `done` runs unless the answer is not the one that decides.
  void OnRegistered(uint32_t amendment, const std::vector<int>& local_ranks,
                    absl::StatusOr<JobLayout> layout);
  // The coordinator's layout, as this host's formation (the members of the registration with
  // `local_ranks`).
  absl::StatusOr<Formation> FormationOf(const JobLayout& layout,
                                        const std::vector<int>& local_ranks);
  // cluster::JobChannelSink
  void OnCommitted(negotiation::CommittedList list) override;
  // Adds this host's inputs to a committed response (false: the job failed).
  bool AddInputs(negotiation::Response& response);
  // Sends host-ready tensors to the coordinator and keeps their inputs until committed.
  void SendReady(std::vector<negotiation::ReadyTensor> tensors);
  void OnJoinDone(const absl::Status& status, int last_rank) override;
  void OnGpuLayout(const JobLayout& layout, const GpuLayout& gpus) override;
  void OnAborted(const absl::Status& status) override;
  void OnLost(const absl::Status& status) override;
  void OnHostsUpdated() override { sink_->OnHostsUpdated(); }

  const JobOptions& options_;
  const std::string job_;
  int size_;        // elastic: from the coordinator's layout
  int local_size_;  // elastic: the members at formation
  const ElasticSpec elastic_;
  cluster::JobChannel channel_;
  NegotiationSink* sink_ = nullptr;  // Not owned; from Start
  int cross_rank_ = -1;
  std::vector<bool> here_;  // by rank: runs on this host (from formation)
  // Host-ready tensors waiting for the coordinator's response, with this host's inputs.
  std::map<std::string, negotiation::ReadyTensor> awaiting_;
  // FormAsync's `done` until the coordinator's answer decided; elastic: this generation's
  // formation (RegisterRanksRequest.formation) and its registrations so far.
  std::function<void(absl::StatusOr<Formation>)> form_done_;
  uint64_t formation_ = 0;
  uint32_t amendments_ = 0;
  std::function<void(absl::StatusOr<gpu::CrossHostGpuPlan>)> gpu_done_;  // GPUs offered
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace ard::jobs
