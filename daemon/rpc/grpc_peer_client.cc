#include "daemon/rpc/grpc_peer_client.h"

#include "daemon/rpc/status_util.h"
#include "grpcpp/create_channel.h"

namespace ard::rpc {

GrpcPeerClient::GrpcPeerClient(const std::string& address, absl::Duration timeout,
                               std::shared_ptr<grpc::ChannelCredentials> credentials)
    : timeout_(timeout) {
  grpc::ChannelArguments args;
  // Reconnect quickly after a peer restarts (defaults back off up to 120 s).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ = grpc::CreateCustomChannel(
      address, credentials ? credentials : grpc::InsecureChannelCredentials(), args);
  cluster_ = ard::Cluster::NewStub(channel_);
  admin_ = ard::Admin::NewStub(channel_);
  negotiation_ = ard::Negotiation::NewStub(channel_);
}

void GrpcPeerClient::CallEnded() {
  absl::MutexLock lock(&mu_);
  --in_flight_;
}

GrpcPeerClient::~GrpcPeerClient() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* n) { return *n == 0; }, &in_flight_));
}

template <typename Request, typename Response, typename Method>
void GrpcPeerClient::Call(Method method, const Request& request, Done<Response> done,
                          absl::Duration timeout) {
  struct CallState {
    grpc::ClientContext context;
    Request request;
    Response response;
  };
  auto state = std::make_shared<CallState>();
  state->request = request;
  state->context.set_deadline(
      std::chrono::system_clock::now() +
      absl::ToChronoMilliseconds(timeout > absl::ZeroDuration() ? timeout : timeout_));
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
           CallEnded();
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

void GrpcPeerClient::IdentifyAsync(const IdentifyRequest& request, Done<IdentifyResponse> done) {
  Call<IdentifyRequest, IdentifyResponse>(
      [this](auto* c, auto* req, auto* resp, auto cb) {
        cluster_->async()->Identify(c, req, resp, std::move(cb));
      },
      request, std::move(done));
}

void GrpcPeerClient::RegisterRanksAsync(const RegisterRanksRequest& request,
                                        absl::Duration timeout, Done<RegisterRanksResponse> done) {
  Call<RegisterRanksRequest, RegisterRanksResponse>(
      [this](auto* c, auto* req, auto* resp, auto cb) {
        negotiation_->async()->RegisterRanks(c, req, resp, std::move(cb));
      },
      request, std::move(done), timeout);
}

void GrpcPeerClient::NegotiateAsync(const NegotiateRequest& request,
                                    Done<NegotiateResponse> done) {
  Call<NegotiateRequest, NegotiateResponse>(
      [this](auto* c, auto* req, auto* resp, auto cb) {
        negotiation_->async()->Negotiate(c, req, resp, std::move(cb));
      },
      request, std::move(done));
}

namespace {

// Reads a WatchJob stream until it ends; deletes itself in OnDone.
class JobEventReader : public grpc::ClientReadReactor<JobEvent>, public cluster::JobWatch {
 public:
  JobEventReader(std::function<void(const JobEvent&)> on_event,
                 std::function<void(absl::Status)> on_end, std::function<void()> ended)
      : on_event_(std::move(on_event)), on_end_(std::move(on_end)), ended_(std::move(ended)) {}

  void Begin(ard::Negotiation::Stub* stub, const WatchJobRequest& request) {
    request_ = request;
    stub->async()->WatchJob(&context_, &request_, this);
    StartRead(&event_);
    StartCall();
  }
  void Cancel() override { context_.TryCancel(); }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // OnDone follows
    on_event_(event_);
    StartRead(&event_);
  }
  void OnDone(const grpc::Status& status) override {
    on_end_(FromGrpcStatus(status));
    auto ended = std::move(ended_);
    self_.reset();  // may delete this
    ended();
  }
  std::shared_ptr<JobEventReader> self_;  // keeps the reactor alive until OnDone

 private:
  grpc::ClientContext context_;
  WatchJobRequest request_;
  JobEvent event_;
  std::function<void(const JobEvent&)> on_event_;
  std::function<void(absl::Status)> on_end_;
  std::function<void()> ended_;
};

}  // namespace

std::shared_ptr<cluster::JobWatch> GrpcPeerClient::WatchJob(
    const WatchJobRequest& request, std::function<void(const JobEvent&)> on_event,
    std::function<void(absl::Status)> on_end) {
  {
    absl::MutexLock lock(&mu_);
    ++in_flight_;
  }
  auto reader = std::make_shared<JobEventReader>(std::move(on_event), std::move(on_end),
                                                 [this] { CallEnded(); });
  reader->self_ = reader;
  reader->Begin(negotiation_.get(), request);
  return reader;
}

}  // namespace ard::rpc
