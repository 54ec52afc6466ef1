// The coordinator's memory of cross-host jobs that ended, so `allreducectl status` and `jobs` show
// a job that failed (state "failed", with the reason) at once and for a while after, rather than
// dropping it or showing the last "running" report of a host that died; with its duration
// (duration_s). Bounded: the last `capacity` jobs, none older than `max_age`. Also each elastic
// job's changes (generations formed, hosts waiting to join, generations lost or ended), by job
// name: the last kChangesKept per job, a job forgotten `max_age` after its last change.
// The JobRegistry keeps one too, for the single-host jobs of its daemon that ended.
// Thread: the control loop only (owned by the JobCoordinator or the JobRegistry).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/common.pb.h"

namespace ard::cluster {

class JobHistory {
 public:
  JobHistory(size_t capacity, absl::Duration max_age) : capacity_(capacity), max_age_(max_age) {}

  // The daemon's bounds (not configurable): the last 32 ended jobs, for at most an hour.
  static constexpr size_t kEndedJobsKept = 32;
  static constexpr absl::Duration kEndedJobsMaxAge = absl::Hours(1);

  // Records a job that ended at `ended`: `summary` is its last entry, with state "failed" (and
  // failure) or "ended"; its age_s at that moment.
  void Add(JobSummary summary, absl::Time ended);
  // The recorded entry of job `job_id` (whatever its age), or null.
  const JobSummary* Find(uint64_t job_id) const;
  // Entries of jobs that ended less than max_age before `now`, oldest first; age_s keeps counting.
  std::vector<JobSummary> Summaries(absl::Time now) const;

  static constexpr size_t kChangesKept = 64;
  // Elastic: a change of job `job` that happened at `at` (its age_s is set when shown).
  void AddChange(const std::string& job, JobSummary::ElasticChange change, absl::Time at);
  // Job `job`'s changes kept, oldest first, with their age_s at `now`.
  std::vector<JobSummary::ElasticChange> Changes(const std::string& job, absl::Time now) const;
  // Job `job`'s latest formation ("formed", "grown", "shrunk", "re-formed"), or null.
  const JobSummary::ElasticChange* LastFormation(const std::string& job) const;

 private:
  struct Ended {
    JobSummary summary;
    absl::Time ended;
  };
  const size_t capacity_;
  const absl::Duration max_age_;
  std::deque<Ended> ended_;  // oldest first
  struct Change {
    JobSummary::ElasticChange change;
    absl::Time at;
  };
  std::map<std::string, std::deque<Change>> changes_;  // by job name, oldest first
};

}  // namespace ard::cluster
