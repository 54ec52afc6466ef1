// The composition root (Envoy's Server, Ray's raylet minus main's lambdas): owns every long-lived
// component of one allreduced instance, builds them in dependency order and tears them down in
// reverse. Several Daemons can run in one process (tests do).
//
// Lifecycle: 1. construct with a validated config; 2. Start() opens the local socket, binds the
// gRPC port (with the health service: SERVING while this daemon is a cluster member), opens the
// metrics endpoint when configured, takes the coordinator or follower role, writes the port file
// and tells systemd READY=1; on error nothing is left running; 3. Shutdown() (or the destructor)
// tells systemd STOPPING=1, leaves the cluster, closes sockets and joins every thread.
// Start/Shutdown are called from one thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/common/event_loop.h"
#include "daemon/systemd/notifier.h"
#include "proto/cluster.pb.h"
#include "proto/common.pb.h"
#include "proto/config.pb.h"

namespace grpc {
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace ard {

class ElectedRole;
namespace admin {
class AdminMutations;
}  // namespace admin
namespace cluster {
class ClusterAgent;
class Coordinator;
class JobCoordinator;
class NegotiationClient;
}  // namespace cluster
namespace dataplane::tcp {
class DataListener;
}  // namespace dataplane::tcp
namespace gpu {
class Device;
}  // namespace gpu
namespace jobs {
class JobRegistry;
}  // namespace jobs
namespace local {
class LocalSocketServer;
}  // namespace local
namespace metrics {
class DaemonMetrics;
class MetricsServer;
}  // namespace metrics
namespace rpc {
class AdminService;
class AdminSocket;
class ClusterService;
class GrpcPeerClient;
class GrpcServer;
class NegotiationService;
}  // namespace rpc
namespace timeline {
class Hub;
class TimelineAdmin;
}  // namespace timeline

class Daemon {
 public:
  explicit Daemon(DaemonConfig config);
  // GPU path: serves GPU tensors with `gpu_device` (not owned; outlives the Daemon) instead of
  // opening the CUDA device. Tests pass the host-memory double (daemon/gpu/testing).
  Daemon(DaemonConfig config, gpu::Device* gpu_device);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  absl::Status Start();
  void Shutdown();

  // Called (control loop thread) when this daemon cannot go on and its owner should shut it down:
  // the coordinator refused its host name because another live daemon holds it, or the two speak
  // different protocol versions. Set before Start(); must not block.
  void SetFatalHandler(std::function<void(const absl::Status&)> on_fatal) {
    on_fatal_ = std::move(on_fatal);
  }

  // Valid after a successful Start().
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }  // 0: metrics_address is empty
  const std::string& address() const { return self_.address(); }
  // The single-coordinator mode's coordinator (with `coordination` set the role is elected).
  bool is_coordinator() const {
    return config_.coordinator().empty() && config_.coordination().empty();
  }

 private:
  // Start's steps, in order.
  std::string DescribeSelf();  // fills self_ and opens the GPU; returns why there is none ("")
  void BuildCoordinator();     // the coordinator role: membership and job negotiation
  void BuildFollower();        // the follower role: the agent and its client to the coordinator
  // What status shows of this host's jobs: the current ones, then its single-host jobs that ended.
  std::vector<JobSummary> LocalJobs() const;
  // Coordinator failover: the role etcd elects (`coordination`), instead of either above.
  absl::Status BuildElected();
  void BuildServices();
  absl::Status OpenEndpoints(std::shared_ptr<grpc::ServerCredentials> server_credentials);
  void Teardown();  // stops and destroys every component, in reverse order
  absl::Status StartDataPlane();
  absl::Status WritePortFile() const;
  void WatchdogOnLoop(absl::Duration interval);
  void HealthOnLoop(absl::Duration interval);
  bool MemberOnLoop() const;  // a cluster member: the health service's SERVING
  absl::Status StartMetrics();
  void CollectMetrics();  // the scrape's thread: copies loop-owned state into metrics_
  void IdentifyOnLoop(const std::string& address, const IdentifyRequest& request,
                      std::function<void(absl::StatusOr<IdentifyResponse>)> done);

  const DaemonConfig config_;
  std::function<void(const absl::Status&)> on_fatal_;
  HostInfo self_;
  int port_ = 0;
  int metrics_port_ = 0;
  bool started_ = false;
  systemd::Notifier notifier_;

  // Declared in construction order; destroyed in reverse.
  std::unique_ptr<metrics::DaemonMetrics> metrics_;  // null when metrics_address is empty
  std::unique_ptr<gpu::Device> gpu_device_;          // GPU path: the CUDA device, when opened here
  gpu::Device* gpu_ = nullptr;  // the device in use (injected or gpu_device_); null: none
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<timeline::Hub> timeline_;  // jobs' timeline recorders (before the jobs)
  std::unique_ptr<jobs::JobRegistry> jobs_;
  std::unique_ptr<dataplane::tcp::DataListener> data_listener_;
  std::unique_ptr<cluster::JobCoordinator> job_coordinator_;       // coordinator role only
  std::unique_ptr<cluster::Coordinator> coordinator_;              // coordinator role only
  std::unique_ptr<cluster::ClusterAgent> agent_;                   // follower role only
  std::unique_ptr<ElectedRole> elected_;                           // elected role only
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials_;  // plaintext or mutual TLS
  std::unique_ptr<rpc::GrpcPeerClient> peer_;  // to the coordinator; follower only
  // Coordinator only: clients that ask a host name's holder who it is (Identify), by address;
  // used on the loop only.
  std::map<std::string, std::unique_ptr<rpc::GrpcPeerClient>> identify_clients_;
  std::unique_ptr<rpc::ClusterService> cluster_service_;
  std::unique_ptr<timeline::TimelineAdmin> timeline_admin_;
  std::unique_ptr<admin::AdminMutations> admin_mutations_;
  std::unique_ptr<rpc::AdminSocket> admin_socket_;  // started once the gRPC server runs
  std::unique_ptr<rpc::AdminService> admin_service_;
  std::unique_ptr<rpc::NegotiationService> negotiation_service_;
  // Cross-host jobs reach the Negotiation service through this: gRPC to the coordinator, or the
  // JobCoordinator directly on the coordinator itself.
  std::unique_ptr<cluster::NegotiationClient> negotiation_client_;
  std::unique_ptr<local::LocalSocketServer> local_;
  std::unique_ptr<rpc::GrpcServer> server_;
  std::unique_ptr<metrics::MetricsServer> metrics_server_;
};

}  // namespace ard
