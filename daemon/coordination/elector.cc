#include "daemon/coordination/elector.h"

#include <pthread.h>

#include <algorithm>

#include "daemon/common/logging.h"

namespace ard::coordination {

Elector::Elector(EtcdClient& etcd, ElectorOptions options,
                 std::function<void(const ElectionUpdate&)> on_change)
    : etcd_(etcd),
      options_(std::move(options)),
      on_change_(std::move(on_change)),
      election_(options_.self, options_.ttl, options_.margin) {}

Elector::~Elector() { Stop(); }

void Elector::Start() {
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "ard-elector");
    Run();
  });
}

void Elector::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Elector::SetCoordinatorAnswering(bool answering) {
  absl::MutexLock lock(&mu_);
  if (answering_ && !answering) woken_ = true;  // lost contact: read now
  answering_ = answering;
}

void Elector::OnNewerTerm(uint64_t term) {
  absl::MutexLock lock(&mu_);
  if (term <= newer_term_) return;
  newer_term_ = term;
  woken_ = true;
}

void Elector::Run() {
  while (true) {
    uint64_t newer_term;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
      newer_term = newer_term_;
      woken_ = false;
    }
    if (newer_term != 0) election_.OnNewerTerm(newer_term);
    election_.Tick(absl::Now());
    Publish();
    Step();
    election_.Tick(absl::Now());
    Publish();
    absl::MutexLock lock(&mu_);
    const absl::Time at = NextStepAt(absl::Now());
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || woken_; };
    mu_.AwaitWithDeadline(absl::Condition(&ready), at);
  }
  election_.Resign();
  Publish();
  if (election_.to_revoke() != 0) {
    // Best effort: when etcd is unreachable the lease simply expires.
    absl::Status revoked = etcd_.RevokeLease(election_.to_revoke());
    if (!revoked.ok()) Logger("cluster")->warn("etcd lease not revoked: {}", revoked.message());
  }
}

void Elector::Step() {
  switch (election_.Next()) {
    case Election::Action::kRevoke:
      election_.OnRevoked(etcd_.RevokeLease(election_.to_revoke()));
      return;
    case Election::Action::kKeepAlive: {
      const absl::Time sent = absl::Now();
      election_.OnKeepAlive(etcd_.KeepAlive(election_.lease()).status(), sent);
      return;
    }
    case Election::Action::kRead:
      election_.OnRead(etcd_.Get(options_.key));
      return;
    case Election::Action::kCampaign: {
      const absl::Time sent = absl::Now();
      absl::StatusOr<int64_t> lease = etcd_.GrantLease(options_.ttl);
      if (!lease.ok()) return election_.OnCampaign(lease.status(), 0, sent);
      election_.OnCampaign(
          etcd_.CreateIfAbsent(options_.key, EncodeCoordinator(options_.self), *lease), *lease,
          sent);
      return;
    }
  }
}

// A step that needs no waiting (campaign, revoke) runs at once; a coordinator renews on time;
// an unreachable etcd is retried every poll.
absl::Time Elector::NextStepAt(absl::Time now) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  switch (election_.Next()) {
    case Election::Action::kRevoke:
    case Election::Action::kCampaign:
      return election_.etcd_error().empty() ? now : now + options_.poll;
    case Election::Action::kKeepAlive: {
      absl::Time at =
          election_.etcd_error().empty() ? election_.NextKeepAlive() : now + options_.poll;
      if (!election_.view().fenced) at = std::min(at, election_.SafeUntil());
      return at;
    }
    case Election::Action::kRead:
      break;
  }
  const bool answering = answering_ && election_.view().role == Role::kFollower;
  return now + (answering && election_.etcd_error().empty() ? options_.poll * 10 : options_.poll);
}

void Elector::Publish() {
  ElectionUpdate update{election_.view(), election_.reason(), election_.etcd_error()};
  if (update.view == published_.view && update.etcd_error == published_.etcd_error) return;
  if (update.view == published_.view) update.reason = published_.reason;
  published_ = update;
  on_change_(update);
}

}  // namespace ard::coordination
