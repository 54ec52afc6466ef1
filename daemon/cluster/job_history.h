// The coordinator's memory of cross-host jobs that ended, so `allreducectl status` and `jobs` show
// a job that failed (state "failed", with the reason) at once and for a while after, rather than
// dropping it or showing the last "running" report of a host that died; with its duration
// (duration_s). Bounded: the last `capacity` jobs, none older than `max_age`.
// Thread: the control loop only (owned by the JobCoordinator).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/time/time.h"
#include "proto/common.pb.h"

namespace ard::cluster {

class JobHistory {
 public:
  JobHistory(size_t capacity, absl::Duration max_age) : capacity_(capacity), max_age_(max_age) {}

  // Records a job that ended at `ended`: `summary` is its last entry, with state "failed" (and
  // failure) or "ended"; its age_s at that moment.
  void Add(JobSummary summary, absl::Time ended);
  // The recorded entry of job `job_id` (whatever its age), or null.
  const JobSummary* Find(uint64_t job_id) const;
  // Entries of jobs that ended less than max_age before `now`, oldest first; age_s keeps counting.
  std::vector<JobSummary> Summaries(absl::Time now) const;

 private:
  struct Ended {
    JobSummary summary;
    absl::Time ended;
  };
  const size_t capacity_;
  const absl::Duration max_age_;
  std::deque<Ended> ended_;  // oldest first
};

}  // namespace ard::cluster
