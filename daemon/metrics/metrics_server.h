// Serves a Registry over HTTP for Prometheus: GET /metrics answers the text exposition format
// (Content-Type text/plain; version=0.0.4); other paths are 404. cpp-httplib (Debian's
// libcpp-httplib) does the HTTP; its own thread pool answers scrapes. SO_REUSEPORT is off, so a
// port in use is an error.
//
// Lifecycle: 1. constructed with the registry (not owned; outlives the server); 2. Start()
// binds HOST:PORT (port 0 picks one) and starts the listener thread; 3. Stop() (or the
// destructor) closes the listener and joins it. Start/Stop from one thread (the Daemon's).
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "daemon/metrics/registry.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace ard::metrics {

class MetricsServer {
 public:
  explicit MetricsServer(Registry& registry);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Returns the bound port; Unavailable naming the address when it cannot listen.
  absl::StatusOr<int> Start(const std::string& listen_address);
  void Stop();

 private:
  Registry& registry_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace ard::metrics
