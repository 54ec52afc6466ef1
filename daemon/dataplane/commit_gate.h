// How a committed response enters a job's executor (DESIGN.md "Threads"): every response, the
// negotiator's (central, on the control loop) and the ones a readiness round released (on the
// executor thread), passes the job's gate once, at the moment it is committed. The gate is the
// job's (jobs::CommitRoad): it applies the job's state check and gives the response its place in
// the committed order (with the timeline's commit marks). The executor numbers nothing itself.
//
// Thread: any (implementations are thread-safe).
#pragma once

#include <cstdint>

#include "daemon/negotiation/tensor_request.h"

namespace ard::dataplane {

// Where a committed response comes from.
enum class CommitOrigin {
  kCentral,   // the job's negotiator committed it (control loop)
  kReleased,  // a readiness round released it (executor thread)
};

class CommitGate {
 public:
  virtual ~CommitGate() = default;
  // `response` was committed: its group (committed order, from 1), or 0 when the job no longer
  // runs it (the executor drops it; its ranks were told when the job stopped running).
  virtual uint64_t Admit(const negotiation::Response& response, CommitOrigin origin) = 0;
};

}  // namespace ard::dataplane
