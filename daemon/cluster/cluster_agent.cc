#include "daemon/cluster/cluster_agent.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/common/version.h"

namespace ard::cluster {

ClusterAgent::ClusterAgent(EventLoop& loop, MembershipClient& coordinator, std::string self_name,
                           AgentOptions options)
    : loop_(loop),
      coordinator_(coordinator),
      self_name_(std::move(self_name)),
      options_(std::move(options)),
      heartbeat_(options_.heartbeat),
      backoff_(options_.backoff_initial),
      host_timeout_(options_.host_timeout) {
  term_ = options_.term;
}

void ClusterAgent::Start(const HostInfo& self) {
  loop_.Post([this, self] {
    self_ = self;
    JoinOnLoop();
  });
}

void ClusterAgent::JoinOnLoop() {
  if (state_ != State::kJoining) return;
  ++join_attempts_;
  JoinRequest request;
  *request.mutable_host() = self_;
  request.set_coordinator_term(term_);
  coordinator_.JoinAsync(request, [this](absl::StatusOr<JoinResponse> response) {
    loop_.Post([this, response = std::move(response)]() mutable { OnJoined(std::move(response)); });
  });
}

void ClusterAgent::OnJoined(absl::StatusOr<JoinResponse> response) {
  if (state_ != State::kJoining) return;
  if (response.ok()) {
    if (absl::Status s = CheckTerm(response->coordinator_term()); !s.ok()) response = s;
  }
  if (response.ok() && response->protocol_version() != kProtocolVersion) {
    // A coordinator of another release accepted us: neither would read the other's job messages
    // right. (Its table lists this host UP until its host timeout.)
    response = absl::UnimplementedError(absl::StrCat(
        "the coordinator ", response->coordinator(), " at ", options_.coordinator_address,
        " speaks protocol version ", response->protocol_version(), ", this daemon (allreduced ",
        kVersion, ") version ", kProtocolVersion, ": run one allreduced release on every host"));
  }
  const absl::StatusCode code = response.status().code();
  if (code == absl::StatusCode::kAlreadyExists || code == absl::StatusCode::kUnimplemented) {
    // Another live daemon holds this host name, or the coordinator speaks another protocol
    // version: retrying cannot fix that, and running on as a non-member would only fail this
    // host's jobs later.
    state_ = State::kRefused;
    last_error_ = response.status().ToString();
    Logger("cluster")->error(
        "{} refused by the coordinator, not joining coordinator={} error=\"{}\"",
        code == absl::StatusCode::kAlreadyExists ? "host name" : "protocol version",
        options_.coordinator_address, response.status().message());
    if (options_.on_refused) options_.on_refused(response.status());
    return;
  }
  if (!response.ok()) {
    // First failure and then every 10th at warn, so a long wait for the coordinator is visible
    // without flooding the journal.
    auto log = Logger("cluster");
    const auto level = (join_attempts_ == 1 || join_attempts_ % 10 == 0) ? spdlog::level::warn
                                                                         : spdlog::level::debug;
    log->log(level, "join failed, retrying coordinator={} attempt={} retry_in_ms={} error=\"{}\"",
             options_.coordinator_address, join_attempts_, absl::ToInt64Milliseconds(backoff_),
             response.status().message());
    last_error_ = response.status().ToString();
    loop_.PostAfter(backoff_, [this] { JoinOnLoop(); });
    backoff_ = std::min(backoff_ * 2, options_.backoff_max);
    return;
  }
  state_ = State::kJoined;
  incarnation_ = response->incarnation();
  backoff_ = options_.backoff_initial;
  join_attempts_ = 0;
  coordinator_reachable_ = true;
  if (response->heartbeat_ms() > 0) heartbeat_ = absl::Milliseconds(response->heartbeat_ms());
  if (response->host_timeout_ms() > 0) {
    host_timeout_ = absl::Milliseconds(response->host_timeout_ms());
  }
  last_contact_ = absl::Now();
  last_error_.clear();
  cut_off_reported_ = false;
  Logger("cluster")->info("joined cluster coordinator={} address={} incarnation={} epoch={}",
                          response->coordinator(), options_.coordinator_address, incarnation_,
                          response->membership_epoch());
  const uint64_t generation = ++generation_;
  loop_.PostAfter(heartbeat_, [this, generation] { HeartbeatOnLoop(generation); });
}

void ClusterAgent::HeartbeatOnLoop(uint64_t generation) {
  if (state_ != State::kJoined || generation != generation_) return;
  CheckCutOff(absl::DeadlineExceededError("no answer to heartbeats"));
  HeartbeatRequest request;
  request.set_host_name(self_.name());
  request.set_incarnation(incarnation_);
  request.set_instance_id(self_.instance_id());
  request.set_coordinator_term(term_);
  if (options_.local_jobs) {
    for (auto& job : options_.local_jobs()) *request.add_jobs() = std::move(job);
  }
  // The next beat is scheduled when this one completes, so at most one is in flight; a call that
  // hangs until its deadline delays the next beat by at most the RPC timeout.
  const absl::Time sent = absl::Now();
  coordinator_.HeartbeatAsync(
      request, [this, generation, sent](absl::StatusOr<HeartbeatResponse> r) {
        const absl::Time received = absl::Now();
        loop_.Post([this, generation, sent, received, r = std::move(r)]() mutable {
          if (r.ok()) {
            clock_.AddSample(sent, absl::FromUnixMicros(r->coordinator_time_us()), received);
          }
          OnHeartbeat(generation, std::move(r));
        });
      });
}

void ClusterAgent::OnHeartbeat(uint64_t generation, absl::StatusOr<HeartbeatResponse> response) {
  if (state_ != State::kJoined || generation != generation_) return;
  if (response.ok()) {
    if (absl::Status s = CheckTerm(response->coordinator_term()); !s.ok()) response = s;
  }
  if (!response.ok()) {
    last_error_ = response.status().ToString();
    NoteCoordinatorUnreachable(response.status(), "heartbeat");
    CheckCutOff(response.status());
    loop_.PostAfter(heartbeat_, [this, generation] { HeartbeatOnLoop(generation); });
    return;
  }
  last_contact_ = absl::Now();
  last_error_.clear();
  cut_off_reported_ = false;
  if (!coordinator_reachable_) {
    coordinator_reachable_ = true;
    Logger("cluster")->info("coordinator reachable again coordinator={}",
                            options_.coordinator_address);
  }
  switch (response->verdict()) {
    case HeartbeatResponse::OK:
      loop_.PostAfter(heartbeat_, [this, generation] { HeartbeatOnLoop(generation); });
      return;
    case HeartbeatResponse::SUPERSEDED:
      state_ = State::kSuperseded;
      Logger("cluster")->error(
          "stopped heartbeating: {}; two daemons share host_name={}, give each a unique one",
          response->detail(), self_.name());
      return;
    default:
      Logger("cluster")->warn("coordinator asked to rejoin reason=\"{}\"", response->detail());
      // The coordinator no longer counts us in: it aborted our cross-host jobs.
      if (options_.on_cut_off) {
        options_.on_cut_off(absl::UnavailableError(
            absl::StrCat("host ", self_.name(), " was dropped by the coordinator (",
                         response->detail(), ") and is rejoining")));
      }
      state_ = State::kJoining;
      JoinOnLoop();
      return;
  }
}

void ClusterAgent::NoteCoordinatorUnreachable(const absl::Status& status, const char* call) {
  if (!coordinator_reachable_) return;
  coordinator_reachable_ = false;
  Logger("cluster")->warn("coordinator unreachable coordinator={} call={} error=\"{}\"",
                          options_.coordinator_address, call, status.message());
}

void ClusterAgent::CheckCutOff(const absl::Status& last_error) {
  const absl::Duration silent = absl::Now() - last_contact_;
  if (cut_off_reported_ || silent < host_timeout_) return;
  cut_off_reported_ = true;
  const absl::Status status = absl::UnavailableError(
      absl::StrCat("host ", self_.name(), " lost contact with the coordinator at ",
                   options_.coordinator_address, " for ", absl::ToInt64Milliseconds(silent),
                   " ms (the cluster marks it DOWN): ", last_error.message()));
  Logger("cluster")->warn("cut off from the coordinator coordinator={} silent_ms={} error=\"{}\"",
                          options_.coordinator_address, absl::ToInt64Milliseconds(silent),
                          last_error.message());
  if (options_.on_cut_off) options_.on_cut_off(status);
}

void ClusterAgent::LeaveAsync(std::function<void()> done) {
  loop_.Post([this, done = std::move(done)]() mutable {
    const bool joined = state_ == State::kJoined;
    state_ = State::kLeft;
    if (!joined) {
      done();
      return;
    }
    LeaveRequest request;
    request.set_host_name(self_.name());
    request.set_incarnation(incarnation_);
    request.set_instance_id(self_.instance_id());
    coordinator_.LeaveAsync(request, [done = std::move(done)](absl::StatusOr<LeaveResponse> r) {
      if (!r.ok()) {
        Logger("cluster")->warn("leave not acknowledged error=\"{}\"", r.status().message());
      }
      done();
    });
  });
}

absl::Status ClusterAgent::CheckTerm(uint64_t term) {
  if (term >= term_) {
    term_ = term;
    return absl::OkStatus();
  }
  return absl::AbortedError(absl::StrCat("stale coordinator at ", options_.coordinator_address,
                                         ": it answered for term ", term, ", etcd names term ",
                                         term_));
}

absl::Status ClusterAgent::NotCoordinator() const {
  return absl::FailedPreconditionError(
      absl::StrCat("host ", self_name_, " is not the coordinator; the coordinator is at ",
                   options_.coordinator_address));
}

void ClusterAgent::HandleJoin(const JoinRequest&, Done<JoinResponse> done) {
  done(NotCoordinator());
}

void ClusterAgent::HandleHeartbeat(const HeartbeatRequest&, Done<HeartbeatResponse> done) {
  done(NotCoordinator());
}

void ClusterAgent::HandleLeave(const LeaveRequest&, Done<LeaveResponse> done) {
  done(NotCoordinator());
}

void ClusterAgent::HandleIdentify(const IdentifyRequest& request, Done<IdentifyResponse> done) {
  loop_.Post([this, request, done = std::move(done)] {
    const HostInfo& claimant = request.claimant();
    // The coordinator asks before giving our name to `claimant`; answering keeps it ours.
    if (claimant.name() == self_name_ && claimant.instance_id() != self_.instance_id()) {
      Logger("cluster")->warn(
          "another daemon asked for this host name host={} claimant_address={} "
          "claimant_instance={} claimant_pid={} (it is refused while this daemon answers)",
          self_name_, claimant.address(), claimant.instance_id(), claimant.pid());
    }
    IdentifyResponse response;
    *response.mutable_host() = self_;
    done(std::move(response));
  });
}

void ClusterAgent::HandleGetClusterStatus(const GetClusterStatusRequest& request,
                                          Done<GetClusterStatusResponse> done) {
  loop_.Post([this, request, done = std::move(done)]() mutable {
    const std::string self = self_name_;
    const std::string coordinator = options_.coordinator_address;
    coordinator_.GetClusterStatusAsync(
        request, [self, coordinator, local = LocalViewOnLoop(),
                  done = std::move(done)](absl::StatusOr<GetClusterStatusResponse> response) {
          if (!response.ok()) {
            // The follower answered: its own view, and why there is no cluster view.
            GetClusterStatusResponse mine;
            mine.set_cluster_view_error(
                absl::StrCat("host ", self, " cannot reach the coordinator at ", coordinator, ": ",
                             response.status().message()));
            response = std::move(mine);
          } else {
            response->set_forwarded(true);
          }
          response->set_answered_by(self);
          *response->mutable_local() = local;
          done(std::move(response));
        });
  });
}

LocalView ClusterAgent::LocalViewOnLoop() const {
  LocalView view;
  view.set_host(self_name_);
  view.set_address(self_.address());
  view.set_role("follower");
  view.set_coordinator_address(options_.coordinator_address);
  switch (state_) {
    case State::kJoining:
      view.set_membership("joining");
      break;
    case State::kJoined:
      view.set_membership(cut_off_reported_ ? "cut_off" : "joined");
      break;
    case State::kSuperseded:
      view.set_membership("superseded");
      break;
    case State::kRefused:
      view.set_membership("refused");
      break;
    case State::kLeft:
      view.set_membership("left");
      break;
  }
  view.set_incarnation(incarnation_);
  view.set_join_attempts(join_attempts_);
  view.set_last_error(last_error_);
  view.set_last_contact_age_s(last_contact_ == absl::InfinitePast()
                                  ? -1
                                  : absl::ToDoubleSeconds(absl::Now() - last_contact_));
  if (options_.local_jobs) {
    for (auto& job : options_.local_jobs()) *view.add_jobs() = std::move(job);
  }
  view.set_version(self_.version());
  view.set_pid(self_.pid());
  return view;
}

}  // namespace ard::cluster
