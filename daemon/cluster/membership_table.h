// The coordinator's cluster view: which hosts exist, their incarnations and UP/DOWN state.
// Pure logic over value types with the clock passed in, so it is unit-tested without sockets or
// sleeps. Owned by the coordinator's control loop (not thread-safe).
//
// Lifecycle of a host entry: 1. Join creates it UP with incarnation 1 (a retried Join from the same
// process returns the same incarnation); 2. Heartbeats keep it UP; 3. Sweep marks it DOWN after
// host_timeout of silence, Leave marks it DOWN at once; 4. a later Join (new process, or the same
// one after being marked DOWN) makes it UP again with incarnation + 1. Entries are never deleted,
// so `status` keeps showing hosts that went away. Whether a new process may take a name that is
// still UP (OtherLiveHolder) is the coordinator's call: it asks the holder first.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/cluster.pb.h"
#include "proto/common.pb.h"

namespace ard::cluster {

// ALREADY_EXISTS for `claimant`, whose Join asks for the host name that `holder` (a live daemon;
// `holder_role` "coordinator" or "member") holds; names both daemons.
absl::Status NameHeldError(const HostInfo& holder, const char* holder_role,
                           const HostInfo& claimant);

class MembershipTable {
 public:
  // `self` is the coordinator's own host; it is UP for as long as the table exists.
  MembershipTable(const HostInfo& self, absl::Duration host_timeout, absl::Time now);

  // Admits a host (or re-admits it, or gives its name to a new process). Rejects a second process
  // claiming the coordinator's name (ALREADY_EXISTS, NameHeldError).
  absl::StatusOr<uint32_t> Join(const HostInfo& host, absl::Time now);

  // The UP member holding `host`'s name under another instance id: a second daemon with the same
  // name, or a restart not yet noticed. Empty when the name is free or DOWN, held by `host`'s own
  // instance, or the coordinator's (Join refuses that one itself).
  std::optional<HostInfo> OtherLiveHolder(const HostInfo& host) const;

  // Records a heartbeat; `*detail` explains a REJOIN or SUPERSEDED verdict.
  HeartbeatResponse::Verdict Heartbeat(const HeartbeatRequest& request, absl::Time now,
                                       std::string* detail);

  // Graceful departure: DOWN at once with reason "left". Ignored for a stale incarnation.
  void Leave(const LeaveRequest& request, absl::Time now);

  // Removes a DOWN host (decommissioned) from the table; refuses an UP host and the coordinator
  // (FAILED_PRECONDITION), an unknown name (NOT_FOUND). The epoch moves on.
  absl::Status Forget(const std::string& name, absl::Time now);

  // Marks UP hosts silent for longer than host_timeout DOWN; returns their names.
  std::vector<std::string> Sweep(absl::Time now);

  // A snapshot for status: hosts sorted by name, ages computed at `now`; jobs are the
  // coordinator's own (`own_jobs`) and those UP hosts reported with their last heartbeat,
  // sorted by job name, then host.
  ClusterView View(absl::Time now, const std::vector<JobSummary>& own_jobs = {}) const;

  uint64_t epoch() const { return epoch_; }
  // Whether `name` is a member that is UP now (the coordinator itself always is).
  bool IsUp(const std::string& name) const;

 private:
  struct Entry {
    HostInfo info;
    HostState state = UP;
    uint32_t incarnation = 0;
    absl::Time joined;
    absl::Time last_heartbeat;
    std::string down_reason;
    std::vector<JobSummary> jobs;  // from the last heartbeat
  };

  const std::string self_name_;
  const absl::Duration host_timeout_;
  std::map<std::string, Entry> hosts_;  // by host name; ordered for a stable view
  uint64_t epoch_ = 1;
};

}  // namespace ard::cluster
