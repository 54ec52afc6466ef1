#include "daemon/metrics/metrics_server.h"

#include <catch2/catch.hpp>

#include "httplib.h"

namespace ard::metrics {
namespace {

TEST_CASE("GET /metrics answers the registry's text; other paths are 404") {
  Registry registry(absl::Hours(1));
  registry.AddCounter("x_total", "X.", {}).Add({}, 3);
  MetricsServer server(registry);
  absl::StatusOr<int> port = server.Start("127.0.0.1:0");
  REQUIRE(port.ok());
  httplib::Client client("127.0.0.1", *port);
  auto response = client.Get("/metrics");
  REQUIRE(response);
  CHECK(response->status == 200);
  CHECK(response->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0) == 0);
  CHECK(response->body.find("\nx_total 3\n") != std::string::npos);
  auto missing = client.Get("/other");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  server.Stop();
  CHECK_FALSE(client.Get("/metrics"));
}

TEST_CASE("a port in use is an error naming the address") {
  Registry registry(absl::Hours(1));
  MetricsServer first(registry);
  absl::StatusOr<int> port = first.Start("127.0.0.1:0");
  REQUIRE(port.ok());
  MetricsServer second(registry);
  const std::string address = "127.0.0.1:" + std::to_string(*port);
  absl::StatusOr<int> taken = second.Start(address);
  REQUIRE_FALSE(taken.ok());
  CHECK(taken.status().code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(taken.status().message()).find(address) != std::string::npos);
}

TEST_CASE("Stop right after Start returns") {
  Registry registry(absl::Hours(1));
  MetricsServer server(registry);
  REQUIRE(server.Start("127.0.0.1:0").ok());
  server.Stop();
  server.Stop();  // twice is harmless
}

}  // namespace
}  // namespace ard::metrics
