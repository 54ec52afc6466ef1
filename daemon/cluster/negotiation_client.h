// Cross-host job calls from a daemon to the coordinator (proto/negotiation.proto), independent of
// gRPC so that the job engine is testable without sockets (STYLE.md "Seams"). Implemented by
// GrpcPeerClient (a follower, over the network) and LoopbackNegotiation (the coordinator's own
// host, straight into its JobCoordinator). Its twin for membership is membership_client.h.
//
// `done` runs exactly once, on an arbitrary thread (a gRPC completion thread for
// GrpcPeerClient); it must not block. Every call has a deadline. Destroying the client waits for
// calls in flight to finish.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/cluster/handlers.h"
#include "proto/negotiation.pb.h"

namespace ard::cluster {

// A running WatchJob stream. Cancel() ends it early (on_end still runs once).
class JobWatch {
 public:
  virtual ~JobWatch() = default;
  virtual void Cancel() = 0;
};

class NegotiationClient {
 public:
  virtual ~NegotiationClient() = default;
  // Waits for the job to form, so it takes its own deadline.
  virtual void RegisterRanksAsync(const RegisterRanksRequest& request, absl::Duration timeout,
                                  Done<RegisterRanksResponse> done) = 0;
  virtual void NegotiateAsync(const NegotiateRequest& request, Done<NegotiateResponse> done) = 0;
  // `on_event` runs for every event in order, then `on_end` once (both on arbitrary threads,
  // never concurrently with each other).
  virtual std::shared_ptr<JobWatch> WatchJob(const WatchJobRequest& request,
                                             std::function<void(const JobEvent&)> on_event,
                                             std::function<void(absl::Status)> on_end) = 0;
};

}  // namespace ard::cluster
