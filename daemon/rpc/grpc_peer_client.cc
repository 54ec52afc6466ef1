#include "daemon/rpc/grpc_peer_client.h"

#include "daemon/rpc/status_util.h"
#include "grpcpp/create_channel.h"

namespace ard::rpc {

GrpcPeerClient::GrpcPeerClient(const std::string& address, absl::Duration timeout)
    : timeout_(timeout) {
  grpc::ChannelArguments args;
  // Reconnect quickly after a peer restarts (defaults back off up to 120 s).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  cluster_ = ard::Cluster::NewStub(channel_);
  admin_ = ard::Admin::NewStub(channel_);
}

GrpcPeerClient::~GrpcPeerClient() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &in_flight_));
}

template <typename Request, typename Response, typename Method>
void GrpcPeerClient::Call(Method method, const Request& request, Done<Response> done) {
  struct CallState {
    grpc::ClientContext context;
    Request request;
    Response response;
  };
  auto state = std::make_shared<CallState>();
  state->request = request;
  state->context.set_deadline(std::chrono::system_clock::now() +
                              absl::ToChronoMilliseconds(timeout_));
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  method(&state->context, &state->request, &state->response,
         [this, state, done = std::move(done)](grpc::Status status) {
           if (status.ok()) {
             done(std::move(state->response));
           } else {
             done(FromGrpcStatus(status));
           }
           absl::MutexLock lock(&mu_);
           --in_flight_;
         });
}

void GrpcPeerClient::JoinAsync(const JoinRequest& request, Done<JoinResponse> done) {
  Call<JoinRequest, JoinResponse>(
      [this](auto* c, auto* req, auto* resp, auto cb) {
        cluster_->async()->Join(c, req, resp, std::move(cb));
      },
      request, std::move(done));
}

void GrpcPeerClient::HeartbeatAsync(const HeartbeatRequest& request,
                                    Done<HeartbeatResponse> done) {
  Call<HeartbeatRequest, HeartbeatResponse>(
      [this](auto* c, auto* req, auto* resp, auto cb) {
        cluster_->async()->Heartbeat(c, req, resp, std::move(cb));
      },
      request, std::move(done));
}

void GrpcPeerClient::LeaveAsync(const LeaveRequest& request, Done<LeaveResponse> done) {
  Call<LeaveRequest, LeaveResponse>(
      [this](auto* c, auto* req, auto* resp, auto cb) {
        cluster_->async()->Leave(c, req, resp, std::move(cb));
      },
      request, std::move(done));
}

void GrpcPeerClient::GetClusterStatusAsync(const GetClusterStatusRequest& request,
                                           Done<GetClusterStatusResponse> done) {
  Call<GetClusterStatusRequest, GetClusterStatusResponse>(
      [this](auto* c, auto* req, auto* resp, auto cb) {
        admin_->async()->GetClusterStatus(c, req, resp, std::move(cb));
      },
      request, std::move(done));
}

}  // namespace ard::rpc
