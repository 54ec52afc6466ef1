#include "daemon/coordination/term_negotiation.h"

#include "absl/strings/str_cat.h"

namespace ard::coordination {
namespace {

// What a failover answers while it is under way: the coordinator is gone or unreachable (its
// connection refused), not the coordinator any more (FAILED_PRECONDITION), or has not counted
// this host in yet (PERMISSION_DENIED until its Join).
bool FailoverAnswer(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsFailedPrecondition(status) ||
         absl::IsPermissionDenied(status);
}

class EndedWatch : public cluster::JobWatch {
 public:
  void Cancel() override {}
};

}  // namespace

void TermNegotiation::SetTargetOnLoop(cluster::NegotiationClient* target, std::string why) {
  absl::MutexLock lock(&mu_);
  target_ = target;
  why_ = std::move(why);
}

cluster::NegotiationClient* TermNegotiation::Target(absl::Status* why) {
  absl::MutexLock lock(&mu_);
  if (target_ == nullptr) *why = absl::UnavailableError(why_);
  return target_;
}

void TermNegotiation::RegisterRanksAsync(const RegisterRanksRequest& request,
                                         absl::Duration timeout,
                                         cluster::Done<RegisterRanksResponse> done) {
  loop_.Post([this, request, deadline = absl::Now() + timeout - reserve_,
              done = std::move(done)]() mutable {
    RegisterOnLoop(std::move(request), deadline, std::move(done), absl::OkStatus());
  });
}

void TermNegotiation::RegisterOnLoop(RegisterRanksRequest request, absl::Time deadline,
                                     cluster::Done<RegisterRanksResponse> done, absl::Status last) {
  absl::Status why;
  cluster::NegotiationClient* target = Target(&why);
  const absl::Time now = absl::Now();
  if (now >= deadline) {
    return done(absl::DeadlineExceededError(absl::StrCat(
        "job ", request.job(), " did not form: no coordinator took it before its form timeout (",
        last.ok() ? why.message() : last.message(), ")")));
  }
  if (target != nullptr && gate_) why = gate_();
  if (target == nullptr || !why.ok()) {
    loop_.PostAfter(retry_, [this, request = std::move(request), deadline, done = std::move(done),
                             why]() mutable {
      RegisterOnLoop(std::move(request), deadline, std::move(done), why);
    });
    return;
  }
  target->RegisterRanksAsync(
      request, deadline - now,
      [this, request, deadline, done](absl::StatusOr<RegisterRanksResponse> response) mutable {
        if (response.ok() || !FailoverAnswer(response.status())) return done(std::move(response));
        loop_.PostAfter(retry_, [this, request = std::move(request), deadline,
                                 done = std::move(done), last = response.status()]() mutable {
          RegisterOnLoop(std::move(request), deadline, std::move(done), last);
        });
      });
}

void TermNegotiation::NegotiateAsync(const NegotiateRequest& request,
                                     cluster::Done<NegotiateResponse> done) {
  absl::Status why;
  cluster::NegotiationClient* target = Target(&why);
  if (target == nullptr) return done(why);
  target->NegotiateAsync(request, std::move(done));
}

std::shared_ptr<cluster::JobWatch> TermNegotiation::WatchJob(
    const WatchJobRequest& request, std::function<void(const JobEvent&)> on_event,
    std::function<void(absl::Status)> on_end) {
  absl::Status why;
  cluster::NegotiationClient* target = Target(&why);
  if (target != nullptr) return target->WatchJob(request, std::move(on_event), std::move(on_end));
  loop_.Post([on_end = std::move(on_end), why] { on_end(why); });
  return std::make_shared<EndedWatch>();
}

}  // namespace ard::coordination
