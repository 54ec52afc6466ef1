#include "daemon/rpc/cluster_service.h"

#include <pwd.h>

#include "absl/strings/str_cat.h"
#include "daemon/rpc/unary_reactor.h"

namespace ard::rpc {

grpc::ServerUnaryReactor* ClusterService::Join(grpc::CallbackServerContext* context,
                                               const JoinRequest* request, JoinResponse* response) {
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

absl::StatusOr<cluster::Caller> AdminService::CallerOf(grpc::CallbackServerContext* context) const {
  cluster::Caller caller;
  if (admin_socket_ != nullptr) {
    if (std::optional<uid_t> uid = admin_socket_->PeerUid(context->peer())) {
      caller.uid = *uid;
      passwd pw{};
      passwd* found = nullptr;
      char buf[1024];
      caller.name = getpwuid_r(*uid, &pw, buf, sizeof(buf), &found) == 0 && found != nullptr
                        ? std::string(found->pw_name)
                        : absl::StrCat("uid ", *uid);
      return caller;
    }
  }
  auto auth = context->auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    caller.mutual_tls = true;
    caller.name = "TLS client";
    for (const auto& id : auth->GetPeerIdentity()) {
      caller.name = absl::StrCat("TLS client ", std::string(id.data(), id.size()));
      break;
    }
    return caller;
  }
  return absl::PermissionDeniedError(
      "forget and abort are refused on a plaintext TCP connection: run allreducectl on a host "
      "of the cluster (it uses the daemon's local admin socket), or use mutual TLS");
}

// A mutation runs only with an authorized caller (CallerOf); `handle` is its MutationHandler
// method.
template <typename Request, typename Response>
grpc::ServerUnaryReactor* AdminService::Mutation(
    grpc::CallbackServerContext* context, const Request* request, Response* response,
    void (cluster::MutationHandler::*handle)(const Request&, const cluster::Caller&,
                                             cluster::Done<Response>)) {
  auto* reactor = context->DefaultReactor();
  auto done = FinishWith(reactor, response);
  absl::StatusOr<cluster::Caller> caller = CallerOf(context);
  if (!caller.ok()) {
    done(caller.status());
  } else {
    (mutations_.*handle)(*request, *caller, std::move(done));
  }
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::ForgetHost(grpc::CallbackServerContext* context,
                                                   const ForgetHostRequest* request,
                                                   ForgetHostResponse* response) {
  return Mutation(context, request, response, &cluster::MutationHandler::HandleForgetHost);
}

grpc::ServerUnaryReactor* AdminService::AbortJob(grpc::CallbackServerContext* context,
                                                 const AbortJobRequest* request,
                                                 AbortJobResponse* response) {
  return Mutation(context, request, response, &cluster::MutationHandler::HandleAbortJob);
}

}  // namespace ard::rpc
