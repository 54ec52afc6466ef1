#include "daemon/gpu_daemon_fixtures.h"

#include "absl/synchronization/notification.h"
#include "daemon/config/config_loader.h"
#include "daemon/rpc/grpc_peer_client.h"

namespace ard::testing {

DaemonConfig Config(const TempDir& dir) {
  DaemonConfig c = config::Defaults();
  c.set_cluster_address("127.0.0.1:0");
  c.set_host_name("h");
  c.set_local_socket(dir.path() + "/h.sock");
  c.set_gpu_fusion_buffer_bytes(256);  // small: the fusion buffer grows
  c.set_gpu_comm_init_timeout_ms(5000);
  REQUIRE(config::ValidateAndComplete(&c).ok());
  return c;
}

std::vector<int> StatusDevices(const Daemon& daemon, const std::string& job,
                               const std::string& host) {
  rpc::GrpcPeerClient client(daemon.address(), absl::Seconds(2));
  absl::Notification done;
  std::vector<int> devices;
  client.GetClusterStatusAsync({}, [&](absl::StatusOr<GetClusterStatusResponse> r) {
    if (r.ok()) {
      for (const JobSummary& j : r->view().jobs()) {
        if (j.name() != job) continue;
        for (const auto& hr : j.ranks()) {
          if (host.empty() || hr.host() == host) {
            devices.assign(hr.gpu_devices().begin(), hr.gpu_devices().end());
          }
        }
      }
    }
    done.Notify();
  });
  done.WaitForNotification();
  return devices;
}

std::string StatusGpuPlan(const Daemon& daemon, const std::string& job) {
  rpc::GrpcPeerClient client(daemon.address(), absl::Seconds(2));
  absl::Notification done;
  std::string plan;
  client.GetClusterStatusAsync({}, [&](absl::StatusOr<GetClusterStatusResponse> r) {
    if (r.ok()) {
      for (const JobSummary& j : r->view().jobs()) {
        if (j.name() == job) plan = j.gpu_plan();
      }
    }
    done.Notify();
  });
  done.WaitForNotification();
  return plan;
}

int UpHosts(const Daemon& daemon) {
  rpc::GrpcPeerClient client(daemon.address(), absl::Seconds(2));
  absl::Notification done;
  int up = 0;
  client.GetClusterStatusAsync({}, [&](absl::StatusOr<GetClusterStatusResponse> r) {
    if (r.ok()) {
      for (const Host& h : r->view().hosts()) up += h.state() == UP;
    }
    done.Notify();
  });
  done.WaitForNotification();
  return up;
}

TwoDaemons::TwoDaemons(const std::string& b_mode) {
  DaemonConfig ca = Config(dir);
  ca.set_host_name("a");
  ca.set_local_socket(socket("a"));
  a = std::make_unique<Daemon>(ca, &device_a);
  REQUIRE(a->Start().ok());
  DaemonConfig cb = Config(dir);
  cb.set_host_name("b");
  cb.set_local_socket(socket("b"));
  cb.set_coordinator("127.0.0.1:" + std::to_string(a->port()));
  cb.set_gpu_mode(b_mode);
  b = std::make_unique<Daemon>(cb, &device_b);
  REQUIRE(b->Start().ok());
  REQUIRE(Eventually([&] { return UpHosts(*a) == 2; }));  // b joined: its jobs can register
}

TwoDaemons::~TwoDaemons() {
  b->Shutdown();
  a->Shutdown();
}

}  // namespace ard::testing
