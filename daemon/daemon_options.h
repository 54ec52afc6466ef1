// What each component of the Daemon is built with, derived from the DaemonConfig (validated by
// the config loader) in one place per concern, so that Daemon::Start only builds and wires
// (daemon.cc). Callbacks into the Daemon's other components are set there, by name.
// Pure functions; called on the thread that starts the Daemon.
#pragma once

#include <string>

#include "daemon/cluster/cluster_agent.h"
#include "daemon/cluster/coordinator.h"
#include "daemon/cluster/job_coordinator.h"
#include "daemon/dataplane/tcp/data_listener.h"
#include "daemon/jobs/job_options.h"
#include "daemon/local/local_socket_server.h"
#include "proto/common.pb.h"
#include "proto/config.pb.h"

namespace ard {

// What the job engine is given besides the config: what the Daemon owns or discovered.
struct JobServices {
  gpu::Device* gpu_device = nullptr;          // Not owned; null: no GPU
  std::string gpu_unavailable;                // why there is no GPU device ("" with one)
  metrics::DaemonMetrics* metrics = nullptr;  // Not owned; null: metrics off
  timeline::Hub* timeline = nullptr;          // Not owned
};

// The job engine's options: JobLimitsFrom, JobGpuFrom and SteadyStateFrom, plus `services`.
// `self`: this daemon's HostInfo with its GPUs described (their identities).
jobs::JobOptions JobOptionsFrom(const DaemonConfig& config, const HostInfo& self,
                                const JobServices& services);
jobs::JobLimits JobLimitsFrom(const DaemonConfig& config);
jobs::JobGpuOptions JobGpuFrom(const DaemonConfig& config, const HostInfo& self,
                               const JobServices& services);
jobs::SteadyStateOptions SteadyStateFrom(const DaemonConfig& config);

// The clients' local socket.
local::LocalSocketOptions LocalSocketFrom(const DaemonConfig& config);

// The TCP data plane's listener and the cross-host algorithm settings its meshes run with.
dataplane::tcp::DataListenerOptions DataListenerFrom(const DaemonConfig& config);

// Membership and negotiation at the coordinator, and a follower's agent (without their
// callbacks). `start_unix_s` makes the coordinator's job ids unique across its restarts.
cluster::CoordinatorOptions CoordinatorFrom(const DaemonConfig& config);
cluster::JobCoordinatorOptions JobCoordinatorFrom(const DaemonConfig& config,
                                                  uint64_t start_unix_s);
cluster::AgentOptions AgentFrom(const DaemonConfig& config);

}  // namespace ard
