#include "daemon/rpc/grpc_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/config/config_loader.h"
#include "grpc/support/log.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"

namespace ard::rpc {
namespace {

// Binds the address with a plain socket (and SO_REUSEADDR, as gRPC does) and returns why that
// fails, or "" when it works. Probing first gives a precise one-line error instead of gRPC's
// multi-line log dump.
std::string WhyBindFails(const std::string& address) {
  std::string host;
  int port;
  if (!config::SplitHostPort(address, &host, &port).ok()) return "bad address";
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) return absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc));
  std::string why;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno == EAFNOSUPPORT) {
        close(fd);
        continue;
      }  // e.g. IPv6 disabled; gRPC skips it too
      why = errno == EADDRINUSE ? "port already in use" : std::strerror(errno);
      close(fd);
      break;
    }
    close(fd);
  }
  freeaddrinfo(res);
  return why;
}

// gRPC's own log lines (gpr_log) go through the "rpc" logger: errors at warn, the rest at debug.
void RouteGrpcLogs() {
  static std::once_flag once;
  std::call_once(once, [] {
    gpr_set_log_function([](gpr_log_func_args* args) {
      const auto level =
          args->severity == GPR_LOG_SEVERITY_ERROR ? spdlog::level::warn : spdlog::level::debug;
      Logger("rpc")->log(level, "grpc {}:{} {}", args->file, args->line, args->message);
    });
  });
}

}  // namespace

GrpcServer::~GrpcServer() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<int> GrpcServer::Start(const std::string& listen_address,
                                      const std::vector<grpc::Service*>& services,
                                      std::shared_ptr<grpc::ServerCredentials> credentials) {
  if (std::string why = WhyBindFails(listen_address); !why.empty()) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen_address, ": ", why));
  }
  RouteGrpcLogs();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen_address,
                           credentials ? credentials : grpc::InsecureServerCredentials(), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (grpc::Service* service : services) builder.RegisterService(service);
  // grpc.health.v1.Health on the same port (probes: Kubernetes, grpc_health_probe). A global
  // switch in gRPC, read by BuildAndStart.
  grpc::EnableDefaultHealthCheckService(true);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    server_.reset();
    std::string why = WhyBindFails(listen_address);
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen_address, ": ",
                                               why.empty() ? "gRPC could not bind" : why));
  }
  {
    absl::MutexLock lock(&health_mu_);
    health_ = server_->GetHealthCheckService();
  }
  SetServing(false);
  return port;
}

void GrpcServer::SetServing(bool serving) {
  absl::MutexLock lock(&health_mu_);
  if (health_ == nullptr) return;
  health_->SetServingStatus(serving);                 // every name, "" included ...
  health_->SetServingStatus(kLivenessService, true);  // ... but the process is alive
}

void GrpcServer::Shutdown(absl::Duration grace) {
  if (server_ == nullptr) return;
  {
    absl::MutexLock lock(&health_mu_);
    health_ = nullptr;
  }
  server_->Shutdown(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(grace));
  server_->Wait();
  server_.reset();
}

}  // namespace ard::rpc
