#include "daemon/cluster/coordinator.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/common/version.h"

namespace ard::cluster {

namespace {
const absl::Status kStarting = absl::UnavailableError("coordinator is starting");
}  // namespace

Coordinator::Coordinator(EventLoop& loop, std::string self_name, CoordinatorOptions options)
    : loop_(loop), self_name_(std::move(self_name)), options_(options) {}

void Coordinator::Start(const HostInfo& self) {
  loop_.Post([this, self] {
    self_ = self;
    table_.emplace(self, options_.host_timeout, absl::Now());
    Logger("cluster")->info("coordinating cluster host={} address={}", self_name_, self.address());
    SweepOnLoop();
  });
}

void Coordinator::SweepOnLoop() {
  for (const std::string& name : table_->Sweep(absl::Now())) {
    Logger("cluster")->warn("host DOWN host={} reason=missed_heartbeats timeout_ms={} epoch={}",
                            name, absl::ToInt64Milliseconds(options_.host_timeout),
                            table_->epoch());
    if (options_.on_host_down) {
      options_.on_host_down(name,
                            absl::StrCat("missed heartbeats for ",
                                         absl::ToInt64Milliseconds(options_.host_timeout), " ms"));
    }
  }
  // Sweep several times per timeout so DOWN is declared close to host_timeout, not 2x it.
  loop_.PostAfter(std::min(options_.heartbeat, options_.host_timeout / 4),
                  [this] { SweepOnLoop(); });
}

void Coordinator::HandleJoin(const JoinRequest& request, Done<JoinResponse> done) {
  loop_.Post([this, request, done = std::move(done)]() mutable {
    JoinOnLoop(request, std::move(done), "");
  });
}

void Coordinator::JoinOnLoop(const JoinRequest& request, Done<JoinResponse> done,
                             const std::string& gone_instance) {
  if (!Ready()) return done(kStarting);
  if (absl::Status s = CheckTerm(request.coordinator_term()); !s.ok()) return done(s);
  if (fenced_) {
    return done(absl::UnavailableError(absl::StrCat(
        "coordinator ", self_name_, " (term ", term_,
        ") is fenced: it cannot renew its etcd lease, so it admits no member until it can")));
  }
  const HostInfo& host = request.host();
  if (host.protocol_version() != kProtocolVersion) {
    // It would misread this cluster's messages (or they its): an operator must upgrade one side.
    const absl::Status refused = absl::UnimplementedError(absl::StrCat(
        "the daemon at ", host.address().substr(0, 300), " (host ",
        absl::CHexEscape(host.name().substr(0, 64)), ", allreduced ",
        absl::CHexEscape(host.version().substr(0, 64)), ") speaks protocol version ",
        host.protocol_version(), ", the coordinator ", self_name_, " (allreduced ", kVersion,
        ") version ", kProtocolVersion, ": run one allreduced release on every host"));
    Logger("cluster")->warn("join refused host={} address={} error=\"{}\"", host.name(),
                            host.address(), refused.message());
    return done(refused);
  }
  const std::optional<HostInfo> holder = table_->OtherLiveHolder(host);
  if (holder && holder->instance_id() != gone_instance && options_.identify) {
    IdentifyRequest ask;
    *ask.mutable_claimant() = host;
    options_.identify(
        holder->address(), ask,
        [this, request, holder = *holder,
         done = std::move(done)](absl::StatusOr<IdentifyResponse> answer) mutable {
          loop_.Post([this, request, holder, done = std::move(done),
                      answer = std::move(answer)]() mutable {
            if (answer.ok() && answer->host().instance_id() == holder.instance_id()) {
              const absl::Status refused = NameHeldError(holder, "member", request.host());
              Logger("cluster")->warn("join refused host={} address={} error=\"{}\"",
                                      request.host().name(), request.host().address(),
                                      refused.message());
              return done(refused);
            }
            Logger("cluster")->info(
                "host name handed over host={} old_address={} old_instance={} new_address={} "
                "new_instance={} reason=\"{}\"",
                holder.name(), holder.address(), holder.instance_id(), request.host().address(),
                request.host().instance_id(),
                answer.ok() ? absl::StrCat("instance ", answer->host().instance_id(),
                                           " answers at the old address")
                            : absl::StrCat("the old instance does not answer: ",
                                           answer.status().message()));
            JoinOnLoop(request, std::move(done), holder.instance_id());
          });
        });
    return;
  }
  const uint64_t epoch_before = table_->epoch();
  absl::StatusOr<uint32_t> incarnation = table_->Join(host, absl::Now());
  if (!incarnation.ok()) {
    Logger("cluster")->warn("join refused host={} address={} error=\"{}\"", host.name(),
                            host.address(), incarnation.status().message());
    done(incarnation.status());
    return;
  }
  if (table_->epoch() != epoch_before) {
    Logger("cluster")->info("host UP host={} address={} incarnation={} epoch={}", host.name(),
                            host.address(), *incarnation, table_->epoch());
  }
  JoinResponse response;
  response.set_incarnation(*incarnation);
  response.set_membership_epoch(table_->epoch());
  response.set_coordinator(self_name_);
  response.set_heartbeat_ms(absl::ToInt64Milliseconds(options_.heartbeat));
  response.set_host_timeout_ms(absl::ToInt64Milliseconds(options_.host_timeout));
  response.set_protocol_version(kProtocolVersion);
  response.set_coordinator_term(term_);
  done(std::move(response));
}

void Coordinator::HandleHeartbeat(const HeartbeatRequest& request, Done<HeartbeatResponse> done) {
  loop_.Post([this, request, done = std::move(done)] {
    if (!Ready()) return done(kStarting);
    if (absl::Status s = CheckTerm(request.coordinator_term()); !s.ok()) return done(s);
    HeartbeatResponse response;
    response.set_coordinator_term(term_);
    std::string detail;
    response.set_verdict(table_->Heartbeat(request, absl::Now(), &detail));
    response.set_detail(detail);
    response.set_membership_epoch(table_->epoch());
    response.set_coordinator_time_us(absl::ToUnixMicros(absl::Now()));
    done(std::move(response));
  });
}

absl::Status Coordinator::CheckTerm(uint64_t term) {
  if (term_ == 0 || term <= term_) return absl::OkStatus();
  if (options_.on_newer_term) options_.on_newer_term(term);
  return absl::AbortedError(absl::StrCat("stale coordinator: ", self_name_, " leads term ", term_,
                                         ", the caller knows term ", term));
}

absl::StatusOr<uint64_t> Coordinator::Forget(const std::string& host) {
  if (!Ready()) return kStarting;
  if (absl::Status s = table_->Forget(host, absl::Now()); !s.ok()) return s;
  Logger("cluster")->info("host forgotten host={} epoch={}", host, table_->epoch());
  return table_->epoch();
}

void Coordinator::HandleLeave(const LeaveRequest& request, Done<LeaveResponse> done) {
  loop_.Post([this, request, done = std::move(done)] {
    if (!Ready()) return done(kStarting);
    const uint64_t epoch_before = table_->epoch();
    table_->Leave(request, absl::Now());
    if (table_->epoch() != epoch_before) {
      Logger("cluster")->info("host DOWN host={} reason=left epoch={}", request.host_name(),
                              table_->epoch());
      if (options_.on_host_down) options_.on_host_down(request.host_name(), "left the cluster");
    }
    done(LeaveResponse());
  });
}

void Coordinator::HandleIdentify(const IdentifyRequest&, Done<IdentifyResponse> done) {
  loop_.Post([this, done = std::move(done)] {
    if (!Ready()) return done(kStarting);
    IdentifyResponse response;
    *response.mutable_host() = self_;
    done(std::move(response));
  });
}

void Coordinator::HandleGetClusterStatus(const GetClusterStatusRequest& request,
                                         Done<GetClusterStatusResponse> done) {
  loop_.Post([this, done = std::move(done)] {
    if (!Ready()) return done(kStarting);
    GetClusterStatusResponse response;
    std::vector<JobSummary> jobs;
    if (options_.local_jobs) jobs = options_.local_jobs();
    if (options_.cluster_jobs) {
      for (auto& j : options_.cluster_jobs()) jobs.push_back(std::move(j));
    }
    *response.mutable_view() = table_->View(absl::Now(), jobs);
    response.set_answered_by(self_name_);
    response.set_forwarded(false);
    done(std::move(response));
  });
}

}  // namespace ard::cluster
