#include "daemon/rpc/cluster_service.h"

#include "daemon/rpc/unary_reactor.h"

namespace ard::rpc {

grpc::ServerUnaryReactor* ClusterService::Join(grpc::CallbackServerContext* context,
                                               const JoinRequest* request,
                                               JoinResponse* response) {
  auto* reactor = context->DefaultReactor();
  handler_.HandleJoin(*request, FinishWith(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* ClusterService::Heartbeat(grpc::CallbackServerContext* context,
                                                    const HeartbeatRequest* request,
                                                    HeartbeatResponse* response) {
  auto* reactor = context->DefaultReactor();
  handler_.HandleHeartbeat(*request, FinishWith(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* ClusterService::Leave(grpc::CallbackServerContext* context,
                                                const LeaveRequest* request,
                                                LeaveResponse* response) {
  auto* reactor = context->DefaultReactor();
  handler_.HandleLeave(*request, FinishWith(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* ClusterService::Identify(grpc::CallbackServerContext* context,
                                                   const IdentifyRequest* request,
                                                   IdentifyResponse* response) {
  auto* reactor = context->DefaultReactor();
  handler_.HandleIdentify(*request, FinishWith(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::GetClusterStatus(grpc::CallbackServerContext* context,
                                                         const GetClusterStatusRequest* request,
                                                         GetClusterStatusResponse* response) {
  auto* reactor = context->DefaultReactor();
  handler_.HandleGetClusterStatus(*request, FinishWith(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::StartTimeline(grpc::CallbackServerContext* context,
                                                      const StartTimelineRequest* request,
                                                      StartTimelineResponse* response) {
  auto* reactor = context->DefaultReactor();
  timeline_.HandleStartTimeline(*request, FinishWith(reactor, response));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::StopTimeline(grpc::CallbackServerContext* context,
                                                     const StopTimelineRequest* request,
                                                     StopTimelineResponse* response) {
  auto* reactor = context->DefaultReactor();
  timeline_.HandleStopTimeline(*request, FinishWith(reactor, response));
  return reactor;
}

}  // namespace ard::rpc
