// Bridges a handler's `done(StatusOr<T>)` to a gRPC callback-API unary reactor. The reactor is
// finished exactly once: by `done`, or, if the handler drops `done` without calling it (its task
// was discarded at shutdown), with UNAVAILABLE so the server can still shut down.
#pragma once

#include <atomic>
#include <memory>

#include "absl/status/statusor.h"
#include "daemon/cluster/handlers.h"
#include "daemon/rpc/status_util.h"
#include "grpcpp/support/server_callback.h"

namespace ard::rpc {

template <typename Response>
cluster::Done<Response> FinishWith(grpc::ServerUnaryReactor* reactor, Response* out) {
  struct Finisher {
    grpc::ServerUnaryReactor* reactor;
    Response* out;
    std::atomic<bool> finished{false};
    void Finish(absl::StatusOr<Response> result) {
      if (finished.exchange(true)) return;
      if (result.ok()) {
        *out = std::move(*result);
        reactor->Finish(grpc::Status::OK);
      } else {
        reactor->Finish(ToGrpcStatus(result.status()));
      }
    }
    ~Finisher() { Finish(absl::UnavailableError("daemon is shutting down")); }
  };
  auto finisher = std::make_shared<Finisher>();
  finisher->reactor = reactor;
  finisher->out = out;
  return [finisher](absl::StatusOr<Response> result) { finisher->Finish(std::move(result)); };
}

}  // namespace ard::rpc
