// gRPC bindings of the Negotiation service (proto/negotiation.proto): unary RegisterRanks and
// Negotiate are posted to the control loop, where the JobCoordinator runs; WatchJob is a server
// stream whose writer is the JobCoordinator's event sink for that host; when the host cancels it
// or its connection breaks, the JobCoordinator hears it (OnWatchEnded, posted). On a daemon that
// is not the coordinator every call fails with FAILED_PRECONDITION naming the coordinator.
// With coordinator failover the coordinator is looked up per call, on the loop (it changes).
#pragma once

#include <functional>
#include <string>

#include "daemon/cluster/job_coordinator.h"
#include "daemon/common/event_loop.h"
#include "proto/negotiation.grpc.pb.h"

namespace ard::rpc {

class NegotiationService final : public ard::Negotiation::CallbackService {
 public:
  // `coordinator` is null on a follower; `coordinator_address` names the real one then.
  NegotiationService(EventLoop& loop, cluster::JobCoordinator* coordinator,
                     std::string coordinator_address);
  // Called on the loop for every call: the JobCoordinator to serve it, or why there is none
  // here. `forming`: the call may form a job (RegisterRanks).
  using Lookup = std::function<absl::StatusOr<cluster::JobCoordinator*>(bool forming)>;
  NegotiationService(EventLoop& loop, Lookup lookup);

  grpc::ServerUnaryReactor* RegisterRanks(grpc::CallbackServerContext* context,
                                          const RegisterRanksRequest* request,
                                          RegisterRanksResponse* response) override;
  grpc::ServerUnaryReactor* Negotiate(grpc::CallbackServerContext* context,
                                      const NegotiateRequest* request,
                                      NegotiateResponse* response) override;
  grpc::ServerWriteReactor<JobEvent>* WatchJob(grpc::CallbackServerContext* context,
                                               const WatchJobRequest* request) override;

 private:
  EventLoop& loop_;
  const Lookup lookup_;
};

}  // namespace ard::rpc
