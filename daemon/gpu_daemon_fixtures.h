// TEST HELPER: real Daemons on the host-memory GPU double (daemon/gpu/testing), for the
// gpu_daemon_*_test files: one daemon with two GPUs (OneDaemon), two daemons in one simulated
// cluster (TwoDaemons), and what `allreducectl status` would show of them. Tests only; used from
// the test's thread.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "catch2/catch.hpp"
#include "daemon/daemon.h"
#include "daemon/gpu/testing/host_device.h"

namespace ard::testing {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ard-gd.XXXXXX";  // short: Unix socket paths are limited to 107 bytes
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Host "h" serving on `dir`/h.sock, cluster port 0, a small (growing) GPU fusion buffer.
DaemonConfig Config(const TempDir& dir);

// Each rank's GPU of job `job` on `host` ("": any) in the cluster status, as `allreducectl
// status` gets it.
std::vector<int> StatusDevices(const Daemon& daemon, const std::string& job,
                               const std::string& host = "");

// The job's GPU plan in the cluster status (its mode and communicator), as `daemon` sees it.
std::string StatusGpuPlan(const Daemon& daemon, const std::string& job);

// Hosts UP in the cluster, as `daemon` sees it.
int UpHosts(const Daemon& daemon);

template <typename Pred>
bool Eventually(Pred pred) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// One daemon (host "h") on a device double with two GPUs, serving over its local socket `sock`.
struct OneDaemon {
  OneDaemon() { REQUIRE(daemon.Start().ok()); }

  TempDir dir;
  gpu::testing::HostWorld world;
  gpu::testing::HostDevice device{world, "h", 1, 2};
  Daemon daemon{Config(dir), &device};
  const std::string sock = dir.path() + "/h.sock";
};

// Two daemons ("hosts" a and b; real gRPC negotiation and TCP data plane on loopback), each on
// its own device double in one simulated cluster: a has GPUs 0 and 1, b has GPU 0, and b runs with
// gpu_mode `b_mode` ("hierarchical" there makes every host of a job hierarchical).
struct TwoDaemons {
  explicit TwoDaemons(const std::string& b_mode);
  ~TwoDaemons();
  std::string socket(const std::string& host) const { return dir.path() + "/" + host + ".sock"; }

  TempDir dir;
  gpu::testing::HostWorld world;
  gpu::testing::HostDevice device_a{world, "a", 1, 2};
  gpu::testing::HostDevice device_b{world, "b", 2, 1};
  std::unique_ptr<Daemon> a, b;
};

}  // namespace ard::testing
