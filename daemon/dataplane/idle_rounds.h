// What a job's executor does while it has nothing queued (DESIGN.md "Steady state without the
// coordinator"): in a cross-host job with the steady state on, the hosts agree on cached tensors
// in readiness rounds over the data plane; a round must include every host, so an idle executor
// waits for either a local reason to start one or a peer's round message, and runs the round on
// its own thread, at this place in the job's sequence of collectives. The job composes it
// (jobs::SteadyState); the executor does not know what a round decides.
//
// Thread: AwaitRound and RunRound on the executor thread; Abort from any thread.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/negotiation/tensor_request.h"

namespace ard::dataplane {

class IdleRounds {
 public:
  virtual ~IdleRounds() = default;
  // Nothing queued: waits until a round is due (true: something changed here, or a peer's round
  // message arrived) or `wakeup_fd` became readable or `timeout` passed (false). An error ends
  // the rounds (the data plane is unusable; the job fails).
  virtual absl::StatusOr<bool> AwaitRound(int wakeup_fd, absl::Duration timeout) = 0;
  // Takes part in one round; returns the responses it releases, to run now in this order.
  virtual absl::StatusOr<std::vector<negotiation::Response>> RunRound() = 0;
  // The job failed or ended: a round waiting for the coordinator's lists returns.
  virtual void Abort(const absl::Status& why) = 0;
  // False once the rounds are over (a peer's connection closed: the job ended there, or failed,
  // which the coordinator tells): the executor waits for queued work only from then on.
  virtual bool active() const = 0;
};

}  // namespace ard::dataplane
