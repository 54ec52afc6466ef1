// Prometheus's standard process metrics for the daemon itself (process_cpu_seconds_total,
// process_resident_memory_bytes, process_virtual_memory_bytes, process_open_fds,
// process_max_fds, process_start_time_seconds), read from /proc/self at each scrape.
// Thread: the scraping thread (a Registry collector).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "daemon/metrics/registry.h"

namespace ard::metrics {

struct ProcessSample {
  double cpu_seconds = 0;  // user + system
  uint64_t resident_bytes = 0;
  uint64_t virtual_bytes = 0;
  uint64_t open_fds = 0;
  uint64_t max_fds = 0;           // soft RLIMIT_NOFILE
  double start_time_seconds = 0;  // since the Unix epoch
};

// Reads this process's figures; Unavailable when /proc cannot be read.
absl::StatusOr<ProcessSample> SampleProcess();

// Declares the process_* gauges on `registry` and refreshes them at every scrape.
void AddProcessMetrics(Registry& registry);

}  // namespace ard::metrics
