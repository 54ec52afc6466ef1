// The daemon's settings for its jobs (from DaemonConfig; see proto/config.proto). Plain data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/negotiation/elastic_settle.h"
#include "daemon/negotiation/steady_defaults.h"

namespace ard::gpu {
class Device;
}  // namespace ard::gpu
namespace ard::metrics {
class DaemonMetrics;
}  // namespace ard::metrics
namespace ard::timeline {
class Hub;
}  // namespace ard::timeline

namespace ard::jobs {

// Timeouts and caps of the daemon's jobs.
struct JobLimits {
  absl::Duration form_timeout = absl::Seconds(60);
  absl::Duration stall_warning = absl::Seconds(60);
  absl::Duration stall_shutdown = absl::ZeroDuration();  // zero: never abort
  uint64_t result_segment_bytes = 64ull << 20;
  uint64_t max_result_bytes = 8ull << 30;
  absl::Duration rpc_timeout = absl::Seconds(2);
  absl::Duration cycle_time = absl::ZeroDuration();  // coalescing delay for host-ready tensors
  int max_jobs = 1024;                               // forming or running jobs at once
  int max_pending_tensors = 65536;  // per job: submitted by some ranks, not yet by all
  // Elastic jobs (DESIGN.md "Elastic training"): a re-formation whose survivors do not all come
  // back, or a new job without the launcher's local size, forms once no rank arrived for this long.
  absl::Duration elastic_settle = negotiation::kElasticSettle;
};

// GPU path: the device and DaemonConfig's gpu_* settings.
struct JobGpuOptions {
  // Why this daemon has no usable GPU device ("" when it has one).
  std::string gpu_unavailable;
  gpu::Device* gpu_device = nullptr;  // Not owned; null without one
  std::string gpu_mode = "auto";
  uint64_t gpu_fusion_buffer_bytes = 64ull << 20;
  absl::Duration gpu_init_timeout = absl::Seconds(60);
  // Every GPU wait after init (a collective's completion, a finalize): past it the job fails.
  absl::Duration gpu_op_timeout = absl::Seconds(60);
  uint32_t max_gpu_event_pool = 1024;
  // Each GPU's physical identity ("<machine id>/<PCI bus id>"; index = ordinal; may be short or
  // empty when unknown): tells the coordinator's plan which daemons share a GPU.
  std::vector<std::string> gpu_physical_ids;
  // Each GPU's PCI bus id (index = ordinal; empty when unknown): GPU_REGISTER's bus id picks the
  // daemon's ordinal, so the process's CUDA_VISIBLE_DEVICES may differ from the daemon's.
  std::vector<std::string> gpu_pci_bus_ids;
};

// Cross-host jobs agree on cached tensors among their hosts (DESIGN.md "Steady state without
// the coordinator"), fusing them up to the smallest of the hosts' thresholds. Defaults:
// negotiation/steady_defaults.h (DaemonConfig's).
struct SteadyStateOptions {
  bool steady_state = negotiation::kSteadyStateDefault;
  uint64_t fusion_threshold_bytes = 128ull << 20;
  // Cached allreduces of at most this many bytes travel in the rounds themselves (0: none).
  uint64_t steady_round_data_max_bytes = negotiation::kSteadyRoundDataMaxBytesDefault;
  // A vote waits up to this long for a cached tensor some local ranks submitted (0: never).
  absl::Duration steady_round_partial_wait =
      absl::Microseconds(negotiation::kSteadyRoundPartialWaitUsDefault);
};

// Everything a job reads, one base per concern (each derived from the config in one place:
// daemon/daemon_options.h); the bases keep the field names flat for the job engine's readers.
struct JobOptions : JobLimits, JobGpuOptions, SteadyStateOptions {
  std::string host_name;
  metrics::DaemonMetrics* metrics = nullptr;  // Not owned; null: metrics off
  timeline::Hub* timeline = nullptr;          // Not owned; null: no timeline
};

}  // namespace ard::jobs
