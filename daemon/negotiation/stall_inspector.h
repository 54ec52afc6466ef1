// The stall inspector (DESIGN.md "Negotiation"): turns a readiness table's waiting list into the
// stalled-tensor entries `allreducectl status` shows, logs each newly stalled tensor once
// (Logger "negotiation"), forgets tensors that completed, and decides stall shutdown. Used by a
// daemon for its local jobs (missing ranks known by pid and last activity) and by the
// coordinator for cross-host jobs (missing ranks known by host).
// Pure logic over value types (time passed in); one per job, owned on the control loop.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/negotiation/readiness_table.h"
#include "proto/common.pb.h"

namespace ard::negotiation {

// What is known about a rank some tensor waits for.
struct MissingRank {
  std::string host;                         // its host ("": not known or not needed)
  uint32_t pid = 0;                         // its process (0: not known)
  std::optional<absl::Time> last_activity;  // its last frame to its daemon, when known
};
using DescribeRank = std::function<MissingRank(int rank)>;

struct StallThresholds {
  absl::Duration warning;                          // a tensor waiting this long is stalled
  absl::Duration shutdown = absl::ZeroDuration();  // ...and this long aborts its job; zero: never
};

class StallInspector {
 public:
  // The entries for the tensors of `waiting` (ReadinessTable::WaitingLongerThan) that waited at
  // least `warning`, oldest first. No side effects: what status shows between inspections.
  static std::vector<JobSummary::StalledTensor> Describe(
      const std::vector<ReadinessTable::Waiting>& waiting, absl::Time now, absl::Duration warning,
      const DescribeRank& describe);

  struct Report {
    std::vector<JobSummary::StalledTensor> stalled;
    // Set when a tensor waited at least the shutdown threshold: the job's abort message
    // ("stall shutdown: tensor T waited 2.0s for ranks 1 on h-b"), naming the oldest such tensor.
    std::optional<std::string> shutdown;
  };
  // The periodic inspection of job `job`: Describe, plus one warning log per newly stalled
  // tensor (a tensor that completed and stalls again is logged again) and stall shutdown.
  Report Inspect(const std::string& job, const std::vector<ReadinessTable::Waiting>& waiting,
                 absl::Time now, const StallThresholds& thresholds, const DescribeRank& describe);
  // The stalled entries of the last Inspect (what status shows between inspections); Forget
  // clears them (the job stopped running).
  const std::vector<JobSummary::StalledTensor>& last() const { return last_; }
  void Forget() { last_.clear(); }

 private:
  std::set<std::string> warned_;  // tensors logged as stalled and still stalled
  std::vector<JobSummary::StalledTensor> last_;
};

}  // namespace ard::negotiation
