// The local stage of negotiation (DESIGN.md "Negotiation"): matches tensors by name across the
// ranks of one job. A tensor is ready once every rank submitted it (in any order) or has joined;
// then it is validated across ranks and emitted as a Response (an error Response on mismatch).
// Grouped tensors are held until the whole group is ready and emitted as one Response. Join: a
// joined rank counts as present (contributing the identity) for allreduce; once every rank has
// joined, one JOIN Response completes all join requests.
// Pure logic over value types (time passed in); owned by the job on the control loop.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/negotiation/tensor_request.h"

namespace ard::negotiation {

class ReadinessTable {
 public:
  // All `size` ranks take part (one host, or the coordinator's view of a cross-host job).
  explicit ReadinessTable(int size);
  // Only `members` (ranks of this host in a cross-host job) must submit for a tensor to be ready;
  // joins are recorded but never completed here (the coordinator completes them: ResetJoins()).
  ReadinessTable(int size, std::vector<int> members);

  // Cross-host: the coordinator completed the job's JOIN; returns this table's join requests and
  // makes every rank active again.
  std::vector<TensorRequest> ResetJoins();

  // Records a request; appends what became ready to `*ready`. An error (a name already in flight
  // from this rank, a rank out of range) concerns only this request, which is not recorded.
  absl::Status Submit(TensorRequest request, absl::Time now, std::vector<Response>* ready);

  // Removes and returns every request still waiting (to fail them when the job fails).
  std::vector<TensorRequest> TakeAll();

  struct Waiting {
    std::string name;
    absl::Duration waited;
    std::vector<int> submitted;  // ranks that submitted it
    std::vector<int> missing;    // ranks that did not (joined ranks count as submitted)
  };
  // Tensors some but not all ranks submitted at least `min_wait` ago, oldest first.
  std::vector<Waiting> WaitingLongerThan(absl::Time now, absl::Duration min_wait) const;

  int pending_tensors() const { return static_cast<int>(pending_.size()); }
  bool is_pending(const std::string& name) const { return pending_.count(name) > 0; }
  int size() const { return size_; }

 private:
  struct Pending {
    std::vector<RankEntry> ranks;
    int count = 0;
    absl::Time first_seen;
  };

  bool Complete(const Pending& p) const;
  void Emit(const std::string& name, Pending pending, std::vector<Response>* ready);
  void EmitJoin(int last_rank, std::vector<Response>* ready);

  const int size_;
  std::vector<bool> member_;  // ranks that must submit
  const bool complete_joins_;
  std::map<std::string, Pending> pending_;  // by tensor name; ordered for stable reports
  std::vector<bool> joined_;
  std::vector<RankEntry> join_requests_;
  int joined_count_ = 0;
  // Grouped tensors that are ready, waiting for the rest of their group (by group id).
  std::map<int, std::vector<ReadyTensor>> groups_;
};

}  // namespace ard::negotiation
