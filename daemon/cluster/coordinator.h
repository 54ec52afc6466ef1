// The coordinator role: owns the cluster view (MembershipTable) and answers Join/Heartbeat/Leave
// and cluster status. All state lives on the control loop; handlers post there and call `done`
// from the loop thread. A Join for a host name that an UP member holds under another instance id
// first asks that member who it is (options.identify): a holder that answers as itself keeps the
// name and the newcomer gets ALREADY_EXISTS; one that does not answer, or a different daemon
// answering at its address (a restart there), lets the newcomer take the name at once. A Join
// of another protocol version (HostInfo.protocol_version) is refused first, with UNIMPLEMENTED.
//
// Lifecycle: 1. construct with the loop (before the gRPC server exists: it needs the handler);
// 2. Start(self) once the bound address is known creates the table (calls before then get
// UNAVAILABLE) and schedules the periodic sweep that marks silent hosts DOWN; 3. handlers serve
// until the loop stops; the destructor must run after the loop has stopped (tasks capture `this`).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "daemon/cluster/handlers.h"
#include "daemon/cluster/membership_table.h"
#include "daemon/common/event_loop.h"

namespace ard::cluster {

struct CoordinatorOptions {
  absl::Duration heartbeat = absl::Seconds(1);
  absl::Duration host_timeout = absl::Seconds(5);
  LocalJobsSource local_jobs;    // may be empty
  LocalJobsSource cluster_jobs;  // cross-host jobs as negotiation sees them; may be empty
  // Called on the loop when a host goes DOWN (missed heartbeats) or leaves; may be empty.
  std::function<void(const std::string& host, const std::string& reason)> on_host_down;
  // Asks the daemon at `address` who it is (Cluster.Identify) with a short deadline; `done` may
  // run on any thread. Called on the loop. Empty: holders are not asked, and a Join takes an UP
  // member's name as if the holder had not answered.
  std::function<void(const std::string& address, const IdentifyRequest& request,
                     Done<IdentifyResponse> done)>
      identify;
  // Coordinator failover (etcd): told (loop) that a Join or Heartbeat named a term newer than
  // this coordinator's (it is stale; the elector checks etcd at once). May be empty.
  std::function<void(uint64_t term)> on_newer_term;
};

class Coordinator : public ClusterHandler, public AdminHandler {
 public:
  Coordinator(EventLoop& loop, std::string self_name, CoordinatorOptions options);

  void Start(const HostInfo& self);
  // Loop thread: whether `host` is a cluster member that is UP (false before Start ran).
  bool IsUp(const std::string& host) const { return Ready() && table_->IsUp(host); }
  // Loop thread: `allreducectl forget` (MembershipTable::Forget). Returns the new epoch.
  absl::StatusOr<uint64_t> Forget(const std::string& host);
  // Loop thread, coordinator failover (etcd): this coordinator's term (0: single-coordinator
  // mode, no checks) and whether it is fenced (its lease may have expired: Joins are refused with
  // UNAVAILABLE; members keep heartbeating). A Join or Heartbeat naming a newer term is refused
  // with ABORTED; answers carry the term.
  void SetTerm(uint64_t term, bool fenced) {
    term_ = term;
    fenced_ = fenced;
  }

  void HandleJoin(const JoinRequest& request, Done<JoinResponse> done) override;
  void HandleHeartbeat(const HeartbeatRequest& request, Done<HeartbeatResponse> done) override;
  void HandleLeave(const LeaveRequest& request, Done<LeaveResponse> done) override;
  void HandleIdentify(const IdentifyRequest& request, Done<IdentifyResponse> done) override;
  void HandleGetClusterStatus(const GetClusterStatusRequest& request,
                              Done<GetClusterStatusResponse> done) override;

 private:
  void SweepOnLoop();
  // Admits `request.host()`, first asking a live holder of its name unless that holder's instance
  // is `gone_instance` (already asked: it did not answer as itself).
  void JoinOnLoop(const JoinRequest& request, Done<JoinResponse> done,
                  const std::string& gone_instance);
  bool Ready() const { return table_.has_value(); }
  // ABORTED when `term` (a request's) is newer than this coordinator's, telling on_newer_term.
  absl::Status CheckTerm(uint64_t term);

  EventLoop& loop_;
  const std::string self_name_;
  const CoordinatorOptions options_;
  std::optional<MembershipTable> table_;  // loop thread only; set by Start()
  HostInfo self_;                         // loop thread only; set by Start()
  uint64_t term_ = 0;                     // loop thread only
  bool fenced_ = false;                   // loop thread only
};

}  // namespace ard::cluster
