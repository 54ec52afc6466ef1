// TcpMesh with --data_plane_tls (data_tls.h, secure_mesh.h): certificates made here with the
// openssl command (test_pki.h).
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"
#include "daemon/dataplane/tcp/data_tls.h"
#include "daemon/dataplane/tcp/mesh_fixture.h"
#include "daemon/dataplane/tcp/tcp_mesh.h"
#include "daemon/dataplane/tcp/test_pki.h"

namespace ard::dataplane::tcp {
namespace {

using Meshes = std::vector<std::unique_ptr<TcpMesh>>;

// Listener options of a host presenting certificate `name`, trusting the CA `ca`.
DataListenerOptions WithTls(const std::string& name, const std::string& ca = "ca") {
  absl::StatusOr<std::shared_ptr<DataTlsContext>> context = TestTlsContext(name, ca);
  INFO(context.status().ToString());
  REQUIRE(context.ok());
  DataListenerOptions options;
  options.tls = *context;
  return options;
}

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

TEST_CASE("TcpMesh with TLS moves every byte both ways on 2 and 4 hosts, large and small") {
  const int n = GENERATE(2, 4);
  LocalHosts hosts(n, WithTls("good"));
  REQUIRE(hosts.start_status().ok());
  absl::StatusOr<Meshes> meshes = hosts.ConnectAll(40);
  INFO(meshes.status().ToString());
  REQUIRE(meshes.ok());
  REQUIRE((*meshes)[0]->encryption().rfind("tls1.3", 0) == 0);
  for (const size_t bytes : {size_t{1}, size_t{100000}, size_t{9} << 20}) {
    std::vector<absl::Status> statuses = RunOnHosts(n, [&](int h) -> absl::Status {
      const int next = (h + 1) % n, prev = (h + n - 1) % n;
      std::vector<uint8_t> out(bytes), in(bytes);
      for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(i * 7 + h);
      absl::Status s = (*meshes)[h]->Exchange(next, out.data(), bytes, prev, in.data(), bytes);
      if (!s.ok()) return s;
      for (size_t i = 0; i < bytes; ++i) {
        if (in[i] != static_cast<uint8_t>(i * 7 + prev)) {
          return absl::InternalError(absl::StrCat("host ", h, " byte ", i, " is wrong"));
        }
      }
      return absl::OkStatus();
    });
    for (const absl::Status& s : statuses) {
      INFO(s.ToString());
      REQUIRE(s.ok());
    }
  }
}

TEST_CASE("TcpMesh refuses a host whose data_plane_tls setting differs, saying so") {
  LocalHosts hosts(std::vector<DataListenerOptions>{WithTls("good"), DataListenerOptions{}});
  REQUIRE(hosts.start_status().ok());
  absl::StatusOr<Meshes> meshes = hosts.ConnectAll(41);
  REQUIRE(meshes.status().code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(Contains(meshes.status(), "data_plane_tls is"));
  REQUIRE(Contains(meshes.status(), "every daemon of a cluster must use the same setting"));
}

TEST_CASE("TcpMesh with TLS refuses a certificate of another CA or naming another host") {
  std::vector<DataListenerOptions> options = {WithTls("good"), WithTls("good")};
  SECTION("another CA") { options[1] = WithTls("intruder", "rogue"); }
  SECTION("another host") { options[1] = WithTls("elsewhere"); }
  SECTION("the dialer's certificate") { options[0] = WithTls("elsewhere"); }
  LocalHosts hosts(options);
  REQUIRE(hosts.start_status().ok());
  absl::StatusOr<Meshes> meshes = hosts.ConnectAll(42, {}, absl::Seconds(5));
  INFO(meshes.status().ToString());
  REQUIRE(!meshes.ok());
  REQUIRE((meshes.status().code() == absl::StatusCode::kUnauthenticated ||
           meshes.status().code() == absl::StatusCode::kUnavailable ||
           meshes.status().code() == absl::StatusCode::kDataLoss));
  REQUIRE(Contains(meshes.status(), "host"));
}

TEST_CASE("DataTlsContext names a file it cannot load") {
  const std::string& d = TestPki();
  absl::StatusOr<std::shared_ptr<DataTlsContext>> context =
      DataTlsContext::Create({d + "/missing.pem", d + "/good.key", d + "/ca.pem"});
  REQUIRE(context.status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(Contains(context.status(), "missing.pem"));
  context = DataTlsContext::Create({d + "/good.pem", d + "/intruder.key", d + "/ca.pem"});
  REQUIRE(context.status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ard::dataplane::tcp
