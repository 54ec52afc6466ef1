// `allreducectl jobs`: the cluster's running jobs and its recently finished and failed ones (the
// coordinator's job history of cross-host jobs, each daemon's of its single-host ones), one row
// each with duration, throughput and, for a failed job, the reason. Pure functions over the cluster
// view; unit-tested.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "proto/common.pb.h"

namespace ard::ctl {

// Forming and running jobs first (by name), then ended and failed ones, most recent first.
// Throughput is bytes reduced per second of the job's duration; "-" before any.
std::string FormatJobsTable(const ClusterView& view);

// {"jobs": [...]}: the same jobs, in the same order, each a JobSummary (proto field names, every
// field printed; duration_s as the table's DURATION for finished jobs).
absl::StatusOr<std::string> FormatJobsJson(const ClusterView& view);

// How long a job ran: duration_s once it ended or failed, else its age.
double JobDurationSeconds(const JobSummary& job);

}  // namespace ard::ctl
