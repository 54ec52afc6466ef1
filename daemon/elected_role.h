// Coordinator failover (DESIGN.md "Coordinator failover"): the role of a daemon whose coordinator
// is elected through etcd (`coordination: "etcd://..."`). It runs the Elector and, on the control
// loop, turns each elected term into a role: this daemon's own Coordinator and JobCoordinator
// when it won, or a ClusterAgent joined to the winner. The cluster and admin services answer
// through it (it forwards to the current term's role), the Negotiation service asks it for the
// JobCoordinator, and the jobs negotiate through its TermNegotiation. A change of coordinator
// fails the cross-host jobs of the old one on this host (elastic ones re-form); a new term of the
// same coordinator (re-elected after an etcd outage) keeps them.
//
// Lifecycle: 1. construct (the Daemon, before its services); 2. Start(self) on the Daemon's
// thread once the address is known: the elector runs; 3. handlers from any thread, each posted to
// the loop; 4. Shutdown(): resigns (revokes the lease) and the follower leaves; 5. destroy after
// the loop stopped. Terms that ended stay (stopped) until then: their timers capture them.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/cluster/handlers.h"
#include "daemon/common/event_loop.h"
#include "daemon/coordination/elector.h"
#include "daemon/coordination/term_negotiation.h"
#include "proto/admin.pb.h"
#include "proto/config.pb.h"

namespace grpc {
class ChannelCredentials;
}  // namespace grpc

namespace ard {
namespace cluster {
class JobCoordinator;
}  // namespace cluster
namespace jobs {
class JobRegistry;
}  // namespace jobs
namespace rpc {
class GrpcEtcdClient;
}  // namespace rpc

struct ElectedRoleServices {
  EventLoop* loop = nullptr;                                   // Not owned.
  jobs::JobRegistry* jobs = nullptr;                           // Not owned.
  std::shared_ptr<grpc::ChannelCredentials> peer_credentials;  // to other daemons
  std::shared_ptr<grpc::ChannelCredentials> etcd_credentials;
  // The coordinator asks a host name's holder who it is (CoordinatorOptions::identify).
  std::function<void(const std::string& address, const IdentifyRequest& request,
                     cluster::Done<IdentifyResponse> done)>
      identify;
  std::function<void(const absl::Status&)> on_fatal;  // the agent's on_refused
};

class ElectedRole : public cluster::ClusterHandler, public cluster::AdminHandler {
 public:
  ElectedRole(const DaemonConfig& config, ElectedRoleServices services);
  ~ElectedRole() override;

  void Start(const HostInfo& self);
  void Shutdown();

  // The jobs' client to the coordinator, whichever it is.
  cluster::NegotiationClient& negotiation() { return negotiation_; }
  // Loop thread: this daemon's JobCoordinator, or why there is none (not the coordinator; fenced
  // and `forming`).
  absl::StatusOr<cluster::JobCoordinator*> JobCoordinatorOnLoop(bool forming) const;
  // Loop thread: a cluster member (the health service's SERVING).
  bool MemberOnLoop() const;

  void HandleJoin(const JoinRequest& request, cluster::Done<JoinResponse> done) override;
  void HandleHeartbeat(const HeartbeatRequest& request,
                       cluster::Done<HeartbeatResponse> done) override;
  void HandleLeave(const LeaveRequest& request, cluster::Done<LeaveResponse> done) override;
  void HandleIdentify(const IdentifyRequest& request,
                      cluster::Done<IdentifyResponse> done) override;
  void HandleGetClusterStatus(const GetClusterStatusRequest& request,
                              cluster::Done<GetClusterStatusResponse> done) override;

 private:
  struct Term;

  void ApplyOnLoop(const coordination::ElectionUpdate& update);
  std::unique_ptr<Term> CoordinatorTerm(const coordination::CoordinatorView& view);
  std::unique_ptr<Term> FollowerTerm(const coordination::CoordinatorView& view);
  void Retire(const std::string& why);
  void RecordOnLoop(const coordination::ElectionUpdate& update);
  void WatchAgentOnLoop();
  CoordinationView ViewOnLoop() const;
  absl::Status NotCoordinator() const;

  const DaemonConfig config_;
  ElectedRoleServices services_;
  EventLoop& loop_;
  const std::vector<std::string> endpoints_;  // etcd's, from `coordination` (validated)
  coordination::TermNegotiation negotiation_;
  std::unique_ptr<rpc::GrpcEtcdClient> etcd_;
  std::unique_ptr<coordination::Elector> elector_;

  // Loop thread only.
  HostInfo self_;
  coordination::ElectionUpdate last_;
  Term* current_ = nullptr;  // the last of terms_, or null: no role (no coordinator known)
  std::vector<std::unique_ptr<Term>> terms_;  // every term this daemon took a role in
  std::deque<CoordinatorChange> history_;     // the last 16 changes
  bool stopping_ = false;
};

// "etcd://h1:2379,h2:2379" -> {"h1:2379", "h2:2379"}; INVALID_ARGUMENT otherwise.
absl::StatusOr<std::vector<std::string>> EtcdEndpoints(const std::string& coordination);

}  // namespace ard
