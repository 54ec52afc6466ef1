// Calls from this daemon to another daemon (normally the coordinator), independent of gRPC so that
// the cluster logic is testable with a fake (STYLE.md "Seams"). `done` runs exactly once, on an
// arbitrary thread (a gRPC completion thread for GrpcPeerClient); it must not block. Every call has
// a deadline. Destroying the client waits for calls in flight to finish.
#pragma once

#include <functional>
#include <memory>

#include "absl/time/time.h"

#include "absl/status/statusor.h"
#include "proto/admin.pb.h"
#include "proto/cluster.pb.h"
#include "proto/negotiation.pb.h"

namespace ard::cluster {

// A running WatchJob stream. Cancel() ends it early (on_end still runs once).
class JobWatch {
 public:
  virtual ~JobWatch() = default;
  virtual void Cancel() = 0;
};

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
  // Who answers at this client's address (the coordinator checks a host name's holder with it).
  virtual void IdentifyAsync(const IdentifyRequest& request, Done<IdentifyResponse> done) {
    done(absl::UnimplementedError("Identify"));
  }

  // Cross-host jobs (proto/negotiation.proto). RegisterRanks waits for the job to form, so it
  // takes its own deadline.
  virtual void RegisterRanksAsync(const RegisterRanksRequest& request, absl::Duration timeout,
                                  Done<RegisterRanksResponse> done) {
    done(absl::UnimplementedError("RegisterRanks"));
  }
  virtual void NegotiateAsync(const NegotiateRequest& request, Done<NegotiateResponse> done) {
    done(absl::UnimplementedError("Negotiate"));
  }
  // `on_event` runs for every event in order, then `on_end` once (both on arbitrary threads,
  // never concurrently with each other).
  virtual std::shared_ptr<JobWatch> WatchJob(const WatchJobRequest& request,
                                             std::function<void(const JobEvent&)> on_event,
                                             std::function<void(absl::Status)> on_end) {
    on_end(absl::UnimplementedError("WatchJob"));
    return nullptr;
  }
};

}  // namespace ard::cluster
