// gRPC bindings of the Cluster and Admin services (proto/cluster.proto, proto/admin.proto).
// Handlers only translate and hand off to the role object (Coordinator or ClusterAgent); they
// never block a gRPC thread.
#pragma once

#include "daemon/cluster/handlers.h"
#include "daemon/rpc/admin_socket.h"
#include "proto/admin.grpc.pb.h"
#include "proto/cluster.grpc.pb.h"

namespace ard::rpc {

class ClusterService final : public ard::Cluster::CallbackService {
 public:
  explicit ClusterService(cluster::ClusterHandler& handler) : handler_(handler) {}

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* context, const JoinRequest* request,
                                 JoinResponse* response) override;
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const HeartbeatRequest* request,
                                      HeartbeatResponse* response) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* context, const LeaveRequest* request,
                                  LeaveResponse* response) override;
  grpc::ServerUnaryReactor* Identify(grpc::CallbackServerContext* context,
                                     const IdentifyRequest* request,
                                     IdentifyResponse* response) override;

 private:
  cluster::ClusterHandler& handler_;  // Not owned.
};

// Mutations (ForgetHost, AbortJob) go to `mutations` with the caller: the uid of an admin-socket
// connection (`admin_socket`, may be null), or an operator over mutual TLS; refused otherwise.
class AdminService final : public ard::Admin::CallbackService {
 public:
  AdminService(cluster::AdminHandler& handler, cluster::TimelineHandler& timeline,
               cluster::MutationHandler& mutations, const AdminSocket* admin_socket)
      : handler_(handler),
        timeline_(timeline),
        mutations_(mutations),
        admin_socket_(admin_socket) {}

  grpc::ServerUnaryReactor* GetClusterStatus(grpc::CallbackServerContext* context,
                                             const GetClusterStatusRequest* request,
                                             GetClusterStatusResponse* response) override;
  grpc::ServerUnaryReactor* StartTimeline(grpc::CallbackServerContext* context,
                                          const StartTimelineRequest* request,
                                          StartTimelineResponse* response) override;
  grpc::ServerUnaryReactor* StopTimeline(grpc::CallbackServerContext* context,
                                         const StopTimelineRequest* request,
                                         StopTimelineResponse* response) override;
  grpc::ServerUnaryReactor* ForgetHost(grpc::CallbackServerContext* context,
                                       const ForgetHostRequest* request,
                                       ForgetHostResponse* response) override;
  grpc::ServerUnaryReactor* AbortJob(grpc::CallbackServerContext* context,
                                     const AbortJobRequest* request,
                                     AbortJobResponse* response) override;

 private:
  absl::StatusOr<cluster::Caller> CallerOf(grpc::CallbackServerContext* context) const;
  template <typename Request, typename Response>
  grpc::ServerUnaryReactor* Mutation(
      grpc::CallbackServerContext* context, const Request* request, Response* response,
      void (cluster::MutationHandler::*handle)(const Request&, const cluster::Caller&,
                                               cluster::Done<Response>));

  cluster::AdminHandler& handler_;         // Not owned.
  cluster::TimelineHandler& timeline_;     // Not owned.
  cluster::MutationHandler& mutations_;    // Not owned.
  const AdminSocket* const admin_socket_;  // Not owned; null: no admin socket
};

}  // namespace ard::rpc
