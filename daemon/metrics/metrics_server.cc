#include "daemon/metrics/metrics_server.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/config/config_loader.h"
#include "httplib.h"

namespace ard::metrics {

MetricsServer::MetricsServer(Registry& registry) : registry_(registry) {}

MetricsServer::~MetricsServer() { Stop(); }

absl::StatusOr<int> MetricsServer::Start(const std::string& listen_address) {
  std::string host;
  int port = 0;
  if (auto s = config::SplitHostPort(listen_address, &host, &port); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("metrics_address: ", s.message()));
  }
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  server_ = std::make_unique<httplib::Server>();
  // httplib's default adds SO_REUSEPORT, which would let two daemons share a port silently.
  server_->set_socket_options([](int fd) {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(registry_.Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  errno = 0;
  int bound = -1;
  if (port == 0) {
    bound = server_->bind_to_any_port(host);
  } else if (server_->bind_to_port(host, port)) {
    bound = port;
  }
  if (bound < 0) {
    const std::string why = errno != 0 ? std::strerror(errno) : "cannot bind";
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", listen_address, ": ", why));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // httplib's stop() is a no-op until the listener runs: wait for it (it starts at once).
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!server_->is_running() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  return bound;
}

void MetricsServer::Stop() {
  if (server_ == nullptr) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace ard::metrics
