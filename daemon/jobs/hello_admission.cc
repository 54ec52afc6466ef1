#include "daemon/jobs/hello_admission.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ard::jobs {

HelloShape ShapeOf(const wire::Hello& hello) {
  const int size = hello.size >= 1 ? hello.size : hello.local_size >= 1 ? hello.local_size : 1;
  const bool cross_host = hello.local_size >= 1 && size > hello.local_size;
  return {size, cross_host ? hello.local_size : size};
}

ElasticSpec ElasticSpecOf(const wire::Hello& hello, bool coordinated) {
  return {static_cast<int>(hello.elastic_min_np), std::max(0, hello.size), coordinated,
          std::max(0, hello.local_size)};
}

absl::Status Admit(const wire::Hello& hello, uid_t uid, pid_t pid, const Job* job,
                   const AdmissionLimits& limits) {
  const std::string name = hello.job;
  const bool elastic = hello.elastic_min_np > 0;
  if (!elastic) {
    const HelloShape shape = ShapeOf(hello);
    if (shape.local_size < shape.size && !limits.cross_host) {
      return absl::UnimplementedError(absl::StrCat("job ", name, " spans hosts (size ", shape.size,
                                                   ", local_size ", hello.local_size,
                                                   ") but cross-host jobs are not enabled here"));
    }
    if (job == nullptr && limits.jobs >= limits.max_jobs) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot start job ", name,
                                                       ": this daemon already has ", limits.jobs,
                                                       " jobs (max_jobs ", limits.max_jobs, ")"));
    }
  }
  if (job == nullptr) return absl::OkStatus();
  if (job->uid() != uid) {
    return absl::PermissionDeniedError(absl::StrCat("job ", name, " belongs to uid ", job->uid(),
                                                    "; a process of uid ", uid, " cannot join it"));
  }
  if (!elastic) return absl::OkStatus();
  if (!job->elastic()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", name, " is not elastic but this process registers elastically"));
  }
  return job->CheckRoom(pid);
}

}  // namespace ard::jobs
