// Whether a process's HELLO may register with the job it names (DESIGN.md "Jobs, ranks and
// membership"): one admission for fixed and elastic jobs. Every HELLO: a job belongs to the
// uid of its first process. Fixed: a job spanning hosts needs cross-host jobs enabled, a new one
// room under max_jobs (its size and rank agreement is Job::CheckHello's). Elastic: the job must
// be elastic and have room (Job::CheckRoom).
// Pure; the control loop (it reads the Job).
#pragma once

#include <sys/types.h>

#include "absl/status/status.h"
#include "daemon/jobs/job.h"
#include "proto/local_wire.h"

namespace ard::jobs {

// A fixed job's size as HELLO says it (missing values default to one host, one rank).
struct HelloShape {
  int size = 1;
  int local_size = 1;  // = size on one host
};
HelloShape ShapeOf(const wire::Hello& hello);

// An elastic HELLO's bounds; `coordinated`: this daemon has cross-host jobs.
ElasticSpec ElasticSpecOf(const wire::Hello& hello, bool coordinated);

// What the daemon contributes to the admission.
struct AdmissionLimits {
  bool cross_host = false;  // cross-host jobs are enabled
  int jobs = 0;             // jobs now (forming or running)
  int max_jobs = 0;
};

// Why a process of `uid`, `pid` may not register with `hello` for `job` (null: none of that
// name yet), or OK.
absl::Status Admit(const wire::Hello& hello, uid_t uid, pid_t pid, const Job* job,
                   const AdmissionLimits& limits);

}  // namespace ard::jobs
