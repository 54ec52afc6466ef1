// Renders a cluster status for humans (a table) and for scripts (one JSON object whose top level
// has `hosts` and `jobs` arrays, `answered_by`, `forwarded`, `cluster_view_error` and, from a
// follower, `local`). When the answering follower has no cluster view (cluster_view_error set)
// the table is the reason and the follower's local view instead. Pure functions; unit-tested.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/admin.pb.h"

namespace ard::ctl {

std::string FormatStatusTable(const GetClusterStatusResponse& status);
absl::StatusOr<std::string> FormatStatusJson(const GetClusterStatusResponse& status);

// "3d4h", "2h5m", "4m10s", "12.3s": compact durations for table cells.
std::string FormatDuration(double seconds);

// Left-aligned columns separated by two spaces; the first row is the header.
std::string RenderTable(const std::vector<std::vector<std::string>>& rows);

// "512 B", "1.5 MiB", "3.0 GiB".
std::string FormatBytes(uint64_t bytes);

}  // namespace ard::ctl
