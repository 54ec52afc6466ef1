// The composition root can be started several times in one process: three Daemons form a
// cluster over real gRPC on loopback, and shut down cleanly in any order.
#include "daemon/daemon.h"

#include <stdlib.h>

#include <filesystem>
#include <map>
#include <memory>

#include "absl/synchronization/notification.h"
#include "catch2/catch.hpp"
#include "daemon/config/config_loader.h"
#include "daemon/rpc/grpc_peer_client.h"

namespace ard {
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ard-dt.XXXXXX";  // short: Unix socket paths are limited to 107 bytes
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

DaemonConfig Config(const TempDir& dir, const std::string& name, const std::string& coordinator) {
  DaemonConfig c = config::Defaults();
  c.set_cluster_address("127.0.0.1:0");
  c.set_host_name(name);
  c.set_local_socket(dir.path() + "/" + name + ".sock");
  c.set_coordinator(coordinator);
  c.set_heartbeat_ms(50);
  c.set_host_timeout_ms(500);
  c.set_join_backoff_max_ms(100);
  REQUIRE(config::ValidateAndComplete(&c).ok());
  return c;
}

// Cluster status as seen through `address`, by host name; empty on error.
std::map<std::string, Host> Hosts(const std::string& address) {
  rpc::GrpcPeerClient client(address, absl::Seconds(2));
  absl::Notification done;
  std::map<std::string, Host> hosts;
  client.GetClusterStatusAsync({}, [&](absl::StatusOr<GetClusterStatusResponse> r) {
    if (r.ok()) {
      for (const Host& h : r->view().hosts()) hosts[h.name()] = h;
    }
    done.Notify();
  });
  done.WaitForNotification();
  return hosts;
}

template <typename Pred>
bool Eventually(Pred pred) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

TEST_CASE("three daemons in one process form a cluster and shut down cleanly") {
  TempDir dir;
  Daemon a(Config(dir, "a", ""));
  REQUIRE(a.Start().ok());
  REQUIRE(a.is_coordinator());
  REQUIRE(a.port() > 0);
  const std::string coordinator = "127.0.0.1:" + std::to_string(a.port());
  auto b = std::make_unique<Daemon>(Config(dir, "b", coordinator));
  Daemon c(Config(dir, "c", coordinator));
  REQUIRE(b->Start().ok());
  REQUIRE(c.Start().ok());

  REQUIRE(Eventually([&] {
    auto hosts = Hosts(coordinator);
    return hosts.size() == 3 && hosts["a"].state() == UP && hosts["b"].state() == UP &&
           hosts["c"].state() == UP;
  }));
  // A follower forwards the same view.
  auto via_c = Hosts(c.address());
  REQUIRE(via_c.size() == 3);
  CHECK(via_c["b"].address() == b->address());

  b->Shutdown();
  auto hosts = Hosts(coordinator);
  CHECK(hosts["b"].state() == DOWN);
  CHECK(hosts["b"].down_reason() == "left the cluster");
  b.reset();
  a.Shutdown();  // the coordinator before its last follower: c must still stop promptly
  const absl::Time start = absl::Now();
  c.Shutdown();
  CHECK(absl::Now() - start < absl::Seconds(5));
}

TEST_CASE("a failed start leaves nothing running and reports one error") {
  TempDir dir;
  Daemon a(Config(dir, "a", ""));
  REQUIRE(a.Start().ok());
  DaemonConfig clash = Config(dir, "x", "");
  clash.set_cluster_address("127.0.0.1:" + std::to_string(a.port()));
  Daemon x(clash);
  absl::Status s = x.Start();
  REQUIRE(!s.ok());
  CHECK(std::string(s.message()).find("port already in use") != std::string::npos);
  CHECK(!std::filesystem::exists(dir.path() + "/x.sock"));
}

}  // namespace
}  // namespace ard
