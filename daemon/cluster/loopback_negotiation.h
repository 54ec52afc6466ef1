// The coordinator daemon's own path to its JobCoordinator: the same PeerClient calls a follower
// makes over gRPC, made directly on the control loop (where both the JobRegistry and the
// JobCoordinator live), saving the loopback gRPC round trip and several thread wake-ups on every
// negotiation of the coordinator's host.
//
// Thread: the control loop only (every caller is the JobRegistry on the loop). Callbacks run on
// the loop thread; event callbacks run inside the coordinator's broadcast, so they must only post.
#pragma once

#include <memory>

#include "daemon/cluster/job_coordinator.h"
#include "daemon/cluster/peer_client.h"

namespace ard::cluster {

class LoopbackNegotiation : public PeerClient {
 public:
  explicit LoopbackNegotiation(JobCoordinator& coordinator) : coordinator_(coordinator) {}

  void JoinAsync(const JoinRequest&, Done<JoinResponse> done) override {
    done(absl::UnimplementedError("Join"));
  }
  void HeartbeatAsync(const HeartbeatRequest&, Done<HeartbeatResponse> done) override {
    done(absl::UnimplementedError("Heartbeat"));
  }
  void LeaveAsync(const LeaveRequest&, Done<LeaveResponse> done) override {
    done(absl::UnimplementedError("Leave"));
  }
  void GetClusterStatusAsync(const GetClusterStatusRequest&,
                             Done<GetClusterStatusResponse> done) override {
    done(absl::UnimplementedError("GetClusterStatus"));
  }

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
