#include "daemon/daemon_options.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "daemon/config/config_loader.h"
#include "daemon/dataplane/tcp/algorithms.h"
#include "daemon/gpu/device_query.h"

namespace ard {

jobs::JobOptions JobOptionsFrom(const DaemonConfig& config, const HostInfo& self,
                                const JobServices& services) {
  jobs::JobOptions options;
  static_cast<jobs::JobLimits&>(options) = JobLimitsFrom(config);
  static_cast<jobs::JobGpuOptions&>(options) = JobGpuFrom(config, self, services);
  static_cast<jobs::SteadyStateOptions&>(options) = SteadyStateFrom(config);
  options.host_name = config.host_name();
  options.metrics = services.metrics;
  options.timeline = services.timeline;
  return options;
}

jobs::JobLimits JobLimitsFrom(const DaemonConfig& config) {
  jobs::JobLimits limits;
  limits.form_timeout = absl::Milliseconds(config.job_form_timeout_ms());
  limits.stall_warning = absl::Milliseconds(config.stall_warning_ms());
  limits.stall_shutdown = absl::Milliseconds(config.stall_shutdown_ms());
  limits.result_segment_bytes = config.result_segment_bytes();
  limits.max_result_bytes = config.max_result_arena_bytes();
  limits.rpc_timeout = absl::Milliseconds(config.rpc_timeout_ms());
  limits.cycle_time = absl::Milliseconds(config.cycle_time_ms());
  limits.max_jobs = static_cast<int>(config.max_jobs());
  limits.max_pending_tensors = static_cast<int>(config.max_pending_tensors());
  return limits;
}

jobs::JobGpuOptions JobGpuFrom(const DaemonConfig& config, const HostInfo& self,
                               const JobServices& services) {
  jobs::JobGpuOptions gpu;
  gpu.gpu_unavailable = services.gpu_unavailable;
  gpu.gpu_device = services.gpu_device;
  gpu.gpu_mode = config.gpu_mode();
  gpu.gpu_fusion_buffer_bytes = config.gpu_fusion_buffer_bytes();
  gpu.gpu_init_timeout = absl::Milliseconds(config.gpu_comm_init_timeout_ms());
  gpu.max_gpu_event_pool = config.max_gpu_event_pool();
  gpu.gpu_physical_ids = gpu::PhysicalIds(self);
  gpu.gpu_pci_bus_ids = gpu::PciBusIds(self);
  return gpu;
}

jobs::SteadyStateOptions SteadyStateFrom(const DaemonConfig& config) {
  jobs::SteadyStateOptions steady;
  steady.steady_state = config.steady_state();
  steady.fusion_threshold_bytes = config.fusion_threshold_bytes();
  steady.steady_round_data_max_bytes = config.steady_round_data_max_bytes();
  steady.steady_round_partial_wait = absl::Microseconds(config.steady_round_partial_wait_us());
  return steady;
}

local::LocalSocketOptions LocalSocketFrom(const DaemonConfig& config) {
  local::LocalSocketOptions options;
  options.path = config.local_socket();
  options.group = config.socket_group();
  options.max_input_bytes_per_process = config.max_input_arena_bytes();
  options.max_clients = static_cast<int>(config.max_clients());
  options.hello_timeout = absl::Milliseconds(config.hello_timeout_ms());
  options.max_outbox_bytes = static_cast<size_t>(config.max_client_outbox_bytes());
  options.peer_policy = config.peer_policy();
  options.allowed_group = config.allowed_group();
  return options;
}

dataplane::tcp::DataListenerOptions DataListenerFrom(const DaemonConfig& config) {
  std::string host;
  int port = 0;
  config::SplitHostPort(
      config.data_address().empty() ? config.cluster_address() : config.data_address(), &host,
      &port)
      .IgnoreError();
  dataplane::tcp::DataListenerOptions options;
  options.address = absl::StrCat(host, ":", config.data_address().empty() ? 0 : port);
  // Validated by the config loader.
  options.algorithms.allreduce =
      dataplane::tcp::ParseAllreduceAlgorithm(config.cross_host_algorithm())
          .value_or(dataplane::tcp::AllreduceAlgorithm::kAuto);
  options.algorithms.ring_threshold_bytes = config.cross_host_ring_threshold_bytes();
  options.algorithms.chunk_bytes = config.cross_host_chunk_bytes();
  options.algorithms.steady_state = config.steady_state();
  options.algorithms.steady_round_data_max_bytes =
      config.steady_state() ? config.steady_round_data_max_bytes() : 0;
  return options;
}

cluster::CoordinatorOptions CoordinatorFrom(const DaemonConfig& config) {
  cluster::CoordinatorOptions options;
  options.heartbeat = absl::Milliseconds(config.heartbeat_ms());
  options.host_timeout = absl::Milliseconds(config.host_timeout_ms());
  return options;
}

cluster::JobCoordinatorOptions JobCoordinatorFrom(const DaemonConfig& config,
                                                  uint64_t start_unix_s) {
  cluster::JobCoordinatorOptions options;
  options.fusion_threshold_bytes = config.fusion_threshold_bytes();
  options.id_prefix = start_unix_s;
  options.stall_warning = absl::Milliseconds(config.stall_warning_ms());
  options.cache_capacity = config.cache_capacity();
  options.stall_shutdown = absl::Milliseconds(config.stall_shutdown_ms());
  return options;
}

cluster::AgentOptions AgentFrom(const DaemonConfig& config) {
  cluster::AgentOptions options;
  options.coordinator_address = config.coordinator();
  options.heartbeat = absl::Milliseconds(config.heartbeat_ms());
  options.backoff_initial = absl::Milliseconds(config.join_backoff_initial_ms());
  options.backoff_max = absl::Milliseconds(config.join_backoff_max_ms());
  options.host_timeout = absl::Milliseconds(config.host_timeout_ms());
  return options;
}

}  // namespace ard
