#include "daemon/elected_role.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "daemon/cluster/cluster_agent.h"
#include "daemon/cluster/coordinator.h"
#include "daemon/cluster/job_coordinator.h"
#include "daemon/cluster/loopback_negotiation.h"
#include "daemon/common/logging.h"
#include "daemon/daemon_options.h"
#include "daemon/jobs/job_registry.h"
#include "daemon/rpc/grpc_etcd_client.h"
#include "daemon/rpc/grpc_peer_client.h"

namespace ard {

using coordination::CoordinatorView;
using coordination::ElectionUpdate;
using coordination::Role;

namespace {

constexpr size_t kHistory = 16;

std::string Describe(const coordination::CoordinatorId& id, uint64_t term) {
  if (term == 0) return "none";
  return absl::StrCat(id.host, " at ", id.address, " (term ", term, ")");
}

}  // namespace

// One elected term in which this daemon took a role. Members are destroyed in reverse: the peers
// (which drain their calls) before the agent that uses them.
struct ElectedRole::Term {
  CoordinatorView view;
  // Coordinator role.
  std::unique_ptr<cluster::JobCoordinator> job_coordinator;
  std::unique_ptr<cluster::Coordinator> coordinator;
  std::unique_ptr<cluster::LoopbackNegotiation> loopback;
  // Follower role.
  std::unique_ptr<cluster::ClusterAgent> agent;
  std::unique_ptr<rpc::GrpcPeerClient> membership_peer;
  std::unique_ptr<rpc::GrpcPeerClient> negotiation_peer;
};

absl::StatusOr<std::vector<std::string>> EtcdEndpoints(const std::string& coordination) {
  constexpr absl::string_view kScheme = "etcd://";
  if (!absl::StartsWith(coordination, kScheme)) {
    return absl::InvalidArgumentError(
        absl::StrCat("coordination: '", coordination, "' is not etcd://HOST:PORT[,HOST:PORT...]"));
  }
  std::vector<std::string> endpoints =
      absl::StrSplit(coordination.substr(kScheme.size()), ',', absl::SkipWhitespace());
  if (endpoints.empty()) {
    return absl::InvalidArgumentError("coordination: etcd:// names no endpoint");
  }
  return endpoints;
}

ElectedRole::ElectedRole(const DaemonConfig& config, ElectedRoleServices services)
    : config_(config),
      services_(std::move(services)),
      loop_(*services_.loop),
      endpoints_(EtcdEndpoints(config.coordination()).value_or(std::vector<std::string>())),
      negotiation_(loop_, absl::Milliseconds(config.coordination_poll_ms()),
                   2 * absl::Milliseconds(config.rpc_timeout_ms())) {
  // This daemon's own coordinator, fenced, forms nothing (a follower's is asked over gRPC).
  negotiation_.SetFormGate([this] {
    if (current_ == nullptr || current_->job_coordinator == nullptr) return absl::OkStatus();
    return JobCoordinatorOnLoop(true).status();
  });
}

ElectedRole::~ElectedRole() {
  if (elector_ != nullptr) elector_->Stop();
}

void ElectedRole::Start(const HostInfo& self) {
  const absl::Duration ttl = absl::Milliseconds(config_.coordination_ttl_ms());
  const absl::Duration poll = absl::Milliseconds(config_.coordination_poll_ms());
  // A renewal must fail well inside the lease: a quarter TTL at most.
  const absl::Duration timeout = std::min(absl::Milliseconds(config_.rpc_timeout_ms()), ttl / 4);
  etcd_ = std::make_unique<rpc::GrpcEtcdClient>(endpoints_, timeout, services_.etcd_credentials);
  coordination::ElectorOptions options;
  options.key = absl::StrCat(config_.coordination_prefix(), "/coordinator");
  options.self = {self.name(), self.address(), self.instance_id()};
  options.ttl = ttl;
  options.poll = poll;
  options.margin = timeout + poll;
  loop_.Post([this, self] {
    self_ = self;
    WatchAgentOnLoop();
  });
  elector_ = std::make_unique<coordination::Elector>(
      *etcd_, options, [this](const ElectionUpdate& update) {
        loop_.Post([this, update] { ApplyOnLoop(update); });
      });
  elector_->Start();
}

void ElectedRole::Shutdown() {
  if (elector_ != nullptr) elector_->Stop();  // resigns: the followers elect at once
  absl::Notification left;
  loop_.Post([this, &left] {
    stopping_ = true;
    for (auto& term : terms_) {
      if (term->job_coordinator != nullptr) term->job_coordinator->Stop();
    }
    if (current_ == nullptr || current_->agent == nullptr) return left.Notify();
    current_->agent->LeaveAsync([&left] { left.Notify(); });
  });
  left.WaitForNotificationWithTimeout(absl::Milliseconds(config_.rpc_timeout_ms()) +
                                      absl::Seconds(1));
}

void ElectedRole::ApplyOnLoop(const ElectionUpdate& update) {
  if (stopping_) return;
  if (update.etcd_error != last_.etcd_error) {
    if (update.etcd_error.empty()) {
      Logger("cluster")->info("etcd reachable again");
    } else {
      Logger("cluster")->warn("etcd unreachable: {}", update.etcd_error);
    }
  }
  const CoordinatorView& view = update.view;
  const bool changed = view != last_.view;
  if (changed) RecordOnLoop(update);
  last_ = update;
  if (!changed) return;
  Logger("cluster")->info("coordination term={} coordinator={} role={} fenced={} reason=\"{}\"",
                          view.term, view.coordinator.host, coordination::RoleName(view.role),
                          view.fenced, update.reason);
  const bool same_daemon = current_ != nullptr && view.role != Role::kNone &&
                           current_->view.coordinator == view.coordinator &&
                           (current_->coordinator != nullptr) == (view.role == Role::kCoordinator);
  if (same_daemon) {
    // A new term (or fencing) of the coordinator we already have: its jobs go on.
    current_->view = view;
    if (current_->coordinator != nullptr) current_->coordinator->SetTerm(view.term, view.fenced);
    return;
  }
  if (view.role == Role::kNone && (current_ == nullptr || current_->agent != nullptr)) {
    // The key is gone: its holder died or is fenced. Keep following it until a successor is
    // elected (its jobs may be alive: an etcd outage fences a coordinator that is still there).
    return;
  }
  const std::string why = absl::StrCat(
      "coordinator changed: ",
      current_ == nullptr ? "none" : Describe(current_->view.coordinator, current_->view.term),
      " -> ", Describe(view.coordinator, view.term), " (", update.reason, ")");
  Retire(why);
  if (view.role == Role::kCoordinator) terms_.push_back(CoordinatorTerm(view));
  if (view.role == Role::kFollower) terms_.push_back(FollowerTerm(view));
  current_ = view.role == Role::kNone ? nullptr : terms_.back().get();
  cluster::NegotiationClient* target = nullptr;
  if (current_ != nullptr) {
    target = current_->loopback != nullptr
                 ? static_cast<cluster::NegotiationClient*>(current_->loopback.get())
                 : current_->negotiation_peer.get();
  }
  negotiation_.SetTargetOnLoop(target, absl::StrCat("no coordinator: ", update.reason));
}

// Ends the current term's role and fails the cross-host jobs formed under it on this host.
void ElectedRole::Retire(const std::string& why) {
  if (current_ != nullptr) {
    if (current_->job_coordinator != nullptr) current_->job_coordinator->Stop();
    if (current_->coordinator != nullptr) current_->coordinator->SetTerm(current_->view.term, true);
    if (current_->agent != nullptr) current_->agent->LeaveAsync([] {});
  }
  current_ = nullptr;
  services_.jobs->FailCrossHostJobs(absl::UnavailableError(
      absl::StrCat(why, "; cross-host jobs of the old coordinator end, elastic ones re-form")));
}

std::unique_ptr<ElectedRole::Term> ElectedRole::CoordinatorTerm(const CoordinatorView& view) {
  auto term = std::make_unique<Term>();
  term->view = view;
  cluster::JobCoordinatorOptions negotiation =
      JobCoordinatorFrom(config_, absl::ToUnixSeconds(absl::Now()));
  Term* t = term.get();
  negotiation.is_up = [t](const std::string& host) { return t->coordinator->IsUp(host); };
  term->job_coordinator = std::make_unique<cluster::JobCoordinator>(loop_, negotiation);
  cluster::CoordinatorOptions membership = CoordinatorFrom(config_);
  membership.local_jobs = [this] { return services_.jobs->Summaries(); };
  membership.cluster_jobs = [t] { return t->job_coordinator->Summaries(); };
  membership.on_host_down = [t](const std::string& host, const std::string& reason) {
    t->job_coordinator->OnHostDown(host, reason);
  };
  membership.identify = services_.identify;
  membership.on_newer_term = [this](uint64_t newer) { elector_->OnNewerTerm(newer); };
  term->coordinator =
      std::make_unique<cluster::Coordinator>(loop_, config_.host_name(), membership);
  term->coordinator->SetTerm(view.term, view.fenced);
  term->coordinator->Start(self_);
  term->loopback = std::make_unique<cluster::LoopbackNegotiation>(*term->job_coordinator);
  return term;
}

std::unique_ptr<ElectedRole::Term> ElectedRole::FollowerTerm(const CoordinatorView& view) {
  auto term = std::make_unique<Term>();
  term->view = view;
  const absl::Duration timeout = absl::Milliseconds(config_.rpc_timeout_ms());
  term->membership_peer = std::make_unique<rpc::GrpcPeerClient>(view.coordinator.address, timeout,
                                                                services_.peer_credentials);
  term->negotiation_peer = std::make_unique<rpc::GrpcPeerClient>(view.coordinator.address, timeout,
                                                                 services_.peer_credentials);
  cluster::AgentOptions agent = AgentFrom(config_);
  agent.coordinator_address = view.coordinator.address;
  agent.term = view.term;
  agent.local_jobs = [this] { return services_.jobs->Summaries(); };
  agent.on_cut_off = [this](const absl::Status& status) {
    services_.jobs->FailCrossHostJobs(status);
  };
  agent.on_refused = services_.on_fatal;
  term->agent = std::make_unique<cluster::ClusterAgent>(loop_, *term->membership_peer,
                                                        config_.host_name(), agent);
  term->agent->Start(self_);
  return term;
}

void ElectedRole::RecordOnLoop(const ElectionUpdate& update) {
  CoordinatorChange change;
  change.set_time_unix_ms(absl::ToUnixMillis(absl::Now()));
  change.set_term(update.view.term);
  change.set_host(update.view.coordinator.host);
  change.set_address(update.view.coordinator.address);
  change.set_reason(update.reason);
  history_.push_back(std::move(change));
  while (history_.size() > kHistory) history_.pop_front();
}

// Tells the elector whether the coordinator answers this daemon's agent (it reads etcd sooner
// when not), every heartbeat.
void ElectedRole::WatchAgentOnLoop() {
  if (stopping_) return;
  if (elector_ != nullptr && current_ != nullptr && current_->agent != nullptr) {
    elector_->SetCoordinatorAnswering(current_->agent->AnsweredOnLoop());
  }
  loop_.PostAfter(absl::Milliseconds(config_.heartbeat_ms()), [this] { WatchAgentOnLoop(); });
}

absl::StatusOr<cluster::JobCoordinator*> ElectedRole::JobCoordinatorOnLoop(bool forming) const {
  if (current_ == nullptr || current_->job_coordinator == nullptr) return NotCoordinator();
  if (forming && current_->view.fenced) {
    return absl::UnavailableError(absl::StrCat(
        "coordinator ", config_.host_name(),
        " is fenced (etcd: ", last_.etcd_error.empty() ? "lease lost" : last_.etcd_error,
        "): no new job forms until it can renew its lease"));
  }
  return current_->job_coordinator.get();
}

bool ElectedRole::MemberOnLoop() const {
  if (current_ == nullptr) return false;
  return current_->coordinator != nullptr || current_->agent->MemberOnLoop();
}

absl::Status ElectedRole::NotCoordinator() const {
  if (current_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "host ", config_.host_name(), " knows no elected coordinator yet",
        last_.etcd_error.empty() ? "" : absl::StrCat(" (etcd: ", last_.etcd_error, ")")));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("host ", config_.host_name(), " is not the coordinator; the coordinator is ",
                   Describe(current_->view.coordinator, current_->view.term)));
}

void ElectedRole::HandleJoin(const JoinRequest& request, cluster::Done<JoinResponse> done) {
  loop_.Post([this, request, done = std::move(done)]() mutable {
    if (current_ == nullptr || current_->coordinator == nullptr) return done(NotCoordinator());
    current_->coordinator->HandleJoin(request, std::move(done));
  });
}

void ElectedRole::HandleHeartbeat(const HeartbeatRequest& request,
                                  cluster::Done<HeartbeatResponse> done) {
  loop_.Post([this, request, done = std::move(done)]() mutable {
    if (current_ == nullptr || current_->coordinator == nullptr) return done(NotCoordinator());
    current_->coordinator->HandleHeartbeat(request, std::move(done));
  });
}

void ElectedRole::HandleLeave(const LeaveRequest& request, cluster::Done<LeaveResponse> done) {
  loop_.Post([this, request, done = std::move(done)]() mutable {
    if (current_ == nullptr || current_->coordinator == nullptr) return done(NotCoordinator());
    current_->coordinator->HandleLeave(request, std::move(done));
  });
}

void ElectedRole::HandleIdentify(const IdentifyRequest&, cluster::Done<IdentifyResponse> done) {
  loop_.Post([this, done = std::move(done)] {
    IdentifyResponse response;
    *response.mutable_host() = self_;
    done(std::move(response));
  });
}

void ElectedRole::HandleGetClusterStatus(const GetClusterStatusRequest& request,
                                         cluster::Done<GetClusterStatusResponse> done) {
  loop_.Post([this, request, done = std::move(done)]() mutable {
    auto with_view = [view = ViewOnLoop(),
                      done = std::move(done)](absl::StatusOr<GetClusterStatusResponse> response) {
      if (response.ok()) *response->mutable_coordination() = view;
      done(std::move(response));
    };
    if (current_ != nullptr && current_->coordinator != nullptr) {
      return current_->coordinator->HandleGetClusterStatus(request, std::move(with_view));
    }
    if (current_ != nullptr) {
      return current_->agent->HandleGetClusterStatus(request, std::move(with_view));
    }
    GetClusterStatusResponse response;
    response.set_answered_by(config_.host_name());
    response.set_cluster_view_error(std::string(NotCoordinator().message()));
    LocalView* local = response.mutable_local();
    local->set_host(config_.host_name());
    local->set_address(self_.address());
    local->set_role("none");
    local->set_membership("no coordinator");
    for (auto& job : services_.jobs->Summaries()) *local->add_jobs() = std::move(job);
    with_view(std::move(response));
  });
}

CoordinationView ElectedRole::ViewOnLoop() const {
  CoordinationView view;
  view.set_mode("etcd");
  for (const std::string& e : endpoints_) view.add_endpoints(e);
  if (current_ != nullptr) {
    view.set_term(current_->view.term);
    view.set_coordinator(current_->view.coordinator.host);
    view.set_coordinator_address(current_->view.coordinator.address);
  }
  const Role role = current_ == nullptr ? Role::kNone : current_->view.role;
  view.set_role(absl::StrCat(coordination::RoleName(role),
                             current_ != nullptr && current_->view.fenced ? " (fenced)" : ""));
  view.set_etcd_state(last_.etcd_error.empty() ? "ok"
                                               : absl::StrCat("unreachable: ", last_.etcd_error));
  for (const CoordinatorChange& change : history_) *view.add_history() = change;
  return view;
}

}  // namespace ard
