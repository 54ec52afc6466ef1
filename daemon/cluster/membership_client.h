// Membership calls from this daemon to another daemon (proto/cluster.proto, and the admin
// status a follower forwards), independent of gRPC so that the follower's logic (ClusterAgent)
// is testable with a fake (STYLE.md "Seams"). Its twin for cross-host jobs is
// negotiation_client.h; GrpcPeerClient implements both over one channel.
//
// `done` runs exactly once, on an arbitrary thread (a gRPC completion thread for
// GrpcPeerClient); it must not block. Every call has a deadline. Destroying the client waits for
// calls in flight to finish.
#pragma once

#include "daemon/cluster/handlers.h"
#include "proto/admin.pb.h"
#include "proto/cluster.pb.h"

namespace ard::cluster {

class MembershipClient {
 public:
  virtual ~MembershipClient() = default;
  virtual void JoinAsync(const JoinRequest& request, Done<JoinResponse> done) = 0;
  virtual void HeartbeatAsync(const HeartbeatRequest& request, Done<HeartbeatResponse> done) = 0;
  virtual void LeaveAsync(const LeaveRequest& request, Done<LeaveResponse> done) = 0;
  virtual void GetClusterStatusAsync(const GetClusterStatusRequest& request,
                                     Done<GetClusterStatusResponse> done) = 0;
  // Who answers at this client's address (the coordinator checks a host name's holder with it).
  virtual void IdentifyAsync(const IdentifyRequest& request, Done<IdentifyResponse> done) = 0;
};

}  // namespace ard::cluster
