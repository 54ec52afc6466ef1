// What the cluster and admin gRPC services call into (Ray-style handler interfaces: no grpcpp
// here, so daemon/rpc/ only translates). `done` may run on any thread, exactly once.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/admin.pb.h"
#include "proto/cluster.pb.h"
#include "proto/common.pb.h"

namespace ard::cluster {

template <typename T>
using Done = std::function<void(absl::StatusOr<T>)>;

// This daemon's local jobs, for the cluster view. Called on the control loop.
using LocalJobsSource = std::function<std::vector<JobSummary>()>;

class ClusterHandler {
 public:
  virtual ~ClusterHandler() = default;
  virtual void HandleJoin(const JoinRequest& request, Done<JoinResponse> done) = 0;
  virtual void HandleHeartbeat(const HeartbeatRequest& request, Done<HeartbeatResponse> done) = 0;
  virtual void HandleLeave(const LeaveRequest& request, Done<LeaveResponse> done) = 0;
  // Answers with this daemon's own HostInfo (whatever its role).
  virtual void HandleIdentify(const IdentifyRequest& request, Done<IdentifyResponse> done) = 0;
};

class AdminHandler {
 public:
  virtual ~AdminHandler() = default;
  virtual void HandleGetClusterStatus(const GetClusterStatusRequest& request,
                                      Done<GetClusterStatusResponse> done) = 0;
};

// This daemon's own part of a job's timeline (daemon/timeline/timeline_admin.h); not forwarded.
class TimelineHandler {
 public:
  virtual ~TimelineHandler() = default;
  virtual void HandleStartTimeline(const StartTimelineRequest& request,
                                   Done<StartTimelineResponse> done) = 0;
  virtual void HandleStopTimeline(const StopTimelineRequest& request,
                                  Done<StopTimelineResponse> done) = 0;
};

// Who asked for a mutation (resolved by the gRPC binding from the connection).
struct Caller {
  uid_t uid = static_cast<uid_t>(-1);  // local admin socket: from SO_PEERCRED
  bool mutual_tls = false;             // an authenticated TLS client: an operator (as root)
  std::string name;                    // for messages: "alice", "uid 1234", "TLS client"
  bool root() const { return mutual_tls || uid == 0; }
};

class MutationHandler {
 public:
  virtual ~MutationHandler() = default;
  virtual void HandleForgetHost(const ForgetHostRequest& request, const Caller& caller,
                                Done<ForgetHostResponse> done) = 0;
  virtual void HandleAbortJob(const AbortJobRequest& request, const Caller& caller,
                              Done<AbortJobResponse> done) = 0;
};

}  // namespace ard::cluster
