// The coordinator daemon's own path to its JobCoordinator: the same NegotiationClient calls a
// follower makes over gRPC, made directly on the control loop (where both the JobRegistry and the
// JobCoordinator live), saving the loopback gRPC round trip and several thread wake-ups on every
// negotiation of the coordinator's host.
//
// Thread: the control loop only (every caller is the JobRegistry on the loop). Callbacks run on
// the loop thread; event callbacks run inside the coordinator's broadcast, so they must only post.
#pragma once

#include <memory>

#include "daemon/cluster/job_coordinator.h"
#include "daemon/cluster/negotiation_client.h"

namespace ard::cluster {

class LoopbackNegotiation : public NegotiationClient {
 public:
  explicit LoopbackNegotiation(JobCoordinator& coordinator) : coordinator_(coordinator) {}

  void RegisterRanksAsync(const RegisterRanksRequest& request, absl::Duration,
                          Done<RegisterRanksResponse> done) override {
    coordinator_.HandleRegisterRanks(request, std::move(done));
  }
  void NegotiateAsync(const NegotiateRequest& request, Done<NegotiateResponse> done) override {
    coordinator_.HandleNegotiate(request, std::move(done));
  }
  std::shared_ptr<JobWatch> WatchJob(const WatchJobRequest& request,
                                     std::function<void(const JobEvent&)> on_event,
                                     std::function<void(absl::Status)> on_end) override;

 private:
  JobCoordinator& coordinator_;  // Not owned.
};

}  // namespace ard::cluster
