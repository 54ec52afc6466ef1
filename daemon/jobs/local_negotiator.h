// The negotiation strategy of a job whose ranks all live on this host (negotiator.h): ranks are
// numbered here (the launcher's kept, the rest by local rank, then arrival; an elastic job's
// densely by place, at most max_np of them), a tensor every rank
// submitted is committed at once (the readiness table already validated it across the ranks and
// completes joins), and the GPU plan needs no other host.
// Thread: the control loop.
#pragma once

#include "daemon/jobs/job_options.h"
#include "daemon/jobs/negotiator.h"

namespace ard::jobs {

class LocalNegotiator : public Negotiator {
 public:
  // `size` 0: an elastic job (its size is the number of members at each formation, at most
  // `elastic_max_np` when that is > 0; the members after them in rank order are left out).
  LocalNegotiator(const JobOptions& options, int size, int elastic_max_np = 0)
      : options_(options), size_(size), max_np_(elastic_max_np) {}

  void FormAsync(const std::vector<MemberInfo>& members,
                 std::function<void(absl::StatusOr<Formation>)> done) override;
  void Start(NegotiationSink* sink) override { sink_ = sink; }
  void HostReady(std::vector<negotiation::Response> ready) override;
  void Join(const negotiation::TensorRequest&) override {}
  void PlanGpusAsync(const gpu::HostGpus& host,
                     std::function<void(absl::StatusOr<gpu::CrossHostGpuPlan>)> done) override;
  void ReportFailure(const absl::Status&) override {}
  void ReportLeft() override {}
  std::vector<negotiation::TensorRequest> TakeUncommitted() override { return {}; }

 private:
  const JobOptions& options_;
  const int size_;
  const int max_np_;
  NegotiationSink* sink_ = nullptr;  // Not owned; from Start
};

}  // namespace ard::jobs
