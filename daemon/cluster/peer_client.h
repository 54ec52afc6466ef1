// Calls from this daemon to another daemon (normally the coordinator), independent of gRPC so that
// the cluster logic is testable with a fake (STYLE.md "Seams"). `done` runs exactly once, on an
// arbitrary thread (a gRPC completion thread for GrpcPeerClient); it must not block. Every call has
// a deadline. Destroying the client waits for calls in flight to finish.
#pragma once

#include <functional>

#include "absl/status/statusor.h"
#include "proto/admin.pb.h"
#include "proto/cluster.pb.h"

namespace ard::cluster {

class PeerClient {
 public:
  template <typename T>
  using Done = std::function<void(absl::StatusOr<T>)>;

  virtual ~PeerClient() = default;
  virtual void JoinAsync(const JoinRequest& request, Done<JoinResponse> done) = 0;
  virtual void HeartbeatAsync(const HeartbeatRequest& request, Done<HeartbeatResponse> done) = 0;
  virtual void LeaveAsync(const LeaveRequest& request, Done<LeaveResponse> done) = 0;
  virtual void GetClusterStatusAsync(const GetClusterStatusRequest& request,
                                     Done<GetClusterStatusResponse> done) = 0;
};

}  // namespace ard::cluster
