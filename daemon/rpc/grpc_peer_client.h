// Both client interfaces of cluster/ (MembershipClient, NegotiationClient) over gRPC's callback
// client API: one channel to one daemon, a deadline on every call. One class for both because
// they share everything but the stubs (the channel, the deadline, the drain of calls in flight);
// each user still sees only the half it uses. Callbacks run on gRPC's threads. The destructor waits
// for calls in flight (bounded by their deadline), so callbacks never outlive what they capture.
#pragma once

#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/cluster/membership_client.h"
#include "daemon/cluster/negotiation_client.h"
#include "grpcpp/security/credentials.h"
#include "proto/admin.grpc.pb.h"
#include "proto/cluster.grpc.pb.h"
#include "proto/negotiation.grpc.pb.h"

namespace ard::rpc {

class GrpcPeerClient : public cluster::MembershipClient, public cluster::NegotiationClient {
 public:
  template <typename T>
  using Done = cluster::Done<T>;

  // `credentials`: plaintext when null (see tls/credentials.h for mutual TLS).
  GrpcPeerClient(const std::string& address, absl::Duration timeout,
                 std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);
  ~GrpcPeerClient() override;

  // MembershipClient.
  void JoinAsync(const JoinRequest& request, Done<JoinResponse> done) override;
  void HeartbeatAsync(const HeartbeatRequest& request, Done<HeartbeatResponse> done) override;
  void LeaveAsync(const LeaveRequest& request, Done<LeaveResponse> done) override;
  void GetClusterStatusAsync(const GetClusterStatusRequest& request,
                             Done<GetClusterStatusResponse> done) override;
  void IdentifyAsync(const IdentifyRequest& request, Done<IdentifyResponse> done) override;

  // NegotiationClient.
  void RegisterRanksAsync(const RegisterRanksRequest& request, absl::Duration timeout,
                          Done<RegisterRanksResponse> done) override;
  void NegotiateAsync(const NegotiateRequest& request, Done<NegotiateResponse> done) override;
  std::shared_ptr<cluster::JobWatch> WatchJob(const WatchJobRequest& request,
                                              std::function<void(const JobEvent&)> on_event,
                                              std::function<void(absl::Status)> on_end) override;

 private:
  template <typename Request, typename Response, typename Method>
  void Call(Method method, const Request& request, Done<Response> done,
            absl::Duration timeout = absl::ZeroDuration());
  void CallEnded();

  const absl::Duration timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<ard::Cluster::Stub> cluster_;
  std::unique_ptr<ard::Admin::Stub> admin_;
  std::unique_ptr<ard::Negotiation::Stub> negotiation_;
  absl::Mutex mu_;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ard::rpc
