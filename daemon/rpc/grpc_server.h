// Owns the daemon's gRPC server: binds the cluster address (port 0 picks one), registers the
// services and gRPC's standard health service (grpc.health.v1, NOT_SERVING until SetServing),
// and shuts down with a deadline. SO_REUSEPORT is off, so a port in use is an error,
// not a silently shared port. Start/Shutdown from one thread (the Daemon's).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"

namespace ard::rpc {

// The health service's name that answers SERVING whenever the server runs, member or not
// (Kubernetes' liveness probe); "" (and any other name) follows SetServing (readiness).
inline constexpr char kLivenessService[] = "liveness";

class GrpcServer {
 public:
  GrpcServer() = default;
  ~GrpcServer();

  // Returns the bound port. `services` are not owned and must outlive Shutdown(). `credentials`:
  // plaintext when null (see tls/credentials.h for mutual TLS).
  absl::StatusOr<int> Start(const std::string& listen_address,
                            const std::vector<grpc::Service*>& services,
                            std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);
  // The health service's answer for "" and every other name but kLivenessService. Any thread.
  void SetServing(bool serving);
  // Stops accepting, cancels calls still running after `grace`, waits for handlers to finish.
  void Shutdown(absl::Duration grace);
  // The running server (null before Start and after Shutdown), for the admin socket.
  grpc::Server* server() const { return server_.get(); }

 private:
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex health_mu_;  // SetServing may race with Shutdown (the control loop calls it)
  grpc::HealthCheckServiceInterface* health_ ABSL_GUARDED_BY(health_mu_) = nullptr;  // server_'s
};

}  // namespace ard::rpc
