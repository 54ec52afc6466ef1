// The admin mutations (DESIGN.md "Admin channel"): `allreducectl forget HOST` removes a DOWN host
// from the coordinator's cluster view (root only); `allreducectl abort JOB` fails a running job
// (root or the job's owner, the uid of its processes) with "job J aborted by USER": every local
// rank is told at once and the job's other hosts through the coordinator, as for any failure.
// The caller was authenticated by the gRPC binding (rpc/admin_socket.h, mutual TLS).
//
// Thread: handlers are called on gRPC threads and post to the control loop, which alone touches
// the coordinator's table and the jobs.
#pragma once

#include <string>

#include "daemon/cluster/coordinator.h"
#include "daemon/cluster/handlers.h"
#include "daemon/common/event_loop.h"
#include "daemon/jobs/job_registry.h"

namespace ard::admin {

class AdminMutations : public cluster::MutationHandler {
 public:
  // `coordinator`: null on a follower (which refuses forget, naming the coordinator).
  AdminMutations(EventLoop& loop, std::string host_name, cluster::Coordinator* coordinator,
                 std::string coordinator_address, jobs::JobRegistry& jobs)
      : loop_(loop),
        host_name_(std::move(host_name)),
        coordinator_(coordinator),
        coordinator_address_(std::move(coordinator_address)),
        jobs_(jobs) {}

  void HandleForgetHost(const ForgetHostRequest& request, const cluster::Caller& caller,
                        cluster::Done<ForgetHostResponse> done) override;
  void HandleAbortJob(const AbortJobRequest& request, const cluster::Caller& caller,
                      cluster::Done<AbortJobResponse> done) override;

 private:
  EventLoop& loop_;
  const std::string host_name_;
  cluster::Coordinator* const coordinator_;  // Not owned; null on a follower
  const std::string coordinator_address_;
  jobs::JobRegistry& jobs_;  // Not owned.
};

}  // namespace ard::admin
