#include "daemon/admin/admin_mutations.h"

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"

namespace ard::admin {

void AdminMutations::HandleForgetHost(const ForgetHostRequest& request,
                                      const cluster::Caller& caller,
                                      cluster::Done<ForgetHostResponse> done) {
  if (!caller.root()) {
    return done(
        absl::PermissionDeniedError(absl::StrCat("forget needs root; you are ", caller.name)));
  }
  if (coordinator_ == nullptr) {
    return done(
        absl::FailedPreconditionError(absl::StrCat("host ", host_name_,
                                                   " is not the coordinator: run forget on the "
                                                   "coordinator's host (",
                                                   coordinator_address_, ")")));
  }
  loop_.Post([this, request, caller, done = std::move(done)] {
    absl::StatusOr<uint64_t> epoch = coordinator_->Forget(request.host());
    if (!epoch.ok()) return done(epoch.status());
    Logger("cluster")->info("forget host={} by=\"{}\"", request.host(), caller.name);
    ForgetHostResponse response;
    response.set_membership_epoch(*epoch);
    done(std::move(response));
  });
}

void AdminMutations::HandleAbortJob(const AbortJobRequest& request, const cluster::Caller& caller,
                                    cluster::Done<AbortJobResponse> done) {
  loop_.Post([this, request, caller, done = std::move(done)] {
    jobs::Job* job = jobs_.Find(request.job());
    if (job == nullptr) {
      return done(absl::NotFoundError(absl::StrCat(
          "no job ", request.job(), " on host ", host_name_,
          "; run abort on a host that runs its ranks (`allreducectl jobs` lists them)")));
    }
    if (!caller.root() && caller.uid != job->uid()) {
      return done(absl::PermissionDeniedError(
          absl::StrCat("job ", request.job(), " belongs to uid ", job->uid(),
                       "; only its owner or root may abort it (you are ", caller.name, ")")));
    }
    if (job->state() != jobs::JobState::kRunning) {
      return done(absl::FailedPreconditionError(absl::StrCat(
          "job ", request.job(), " is ", jobs::JobStateName(job->state()), ", not running")));
    }
    const std::string reason = absl::StrCat("job ", request.job(), " aborted by ", caller.name);
    Logger("local")->warn("{}", reason);
    job->Fail(absl::AbortedError(reason));
    AbortJobResponse response;
    response.set_host(host_name_);
    response.set_reason(reason);
    done(std::move(response));
  });
}

}  // namespace ard::admin
