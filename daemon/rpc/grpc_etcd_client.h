// coordination::EtcdClient over etcd's v3 gRPC API (proto/etcd_v3.proto): one channel per
// endpoint; a call goes to the endpoint that answered last and, when that one is unreachable,
// to each other endpoint in turn (so one etcd member down costs one failed connect, once); a call
// that no endpoint answered in time makes the next call start at the next endpoint (one that
// hangs costs one call, not every call).
// Synchronous calls, each within one deadline whatever endpoints it tries; one thread at a time
// (the elector's).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/coordination/etcd_client.h"
#include "grpcpp/security/credentials.h"
#include "proto/etcd_v3.grpc.pb.h"

namespace ard::rpc {

class GrpcEtcdClient : public coordination::EtcdClient {
 public:
  // `endpoints`: HOST:PORT each; `credentials`: plaintext when null.
  GrpcEtcdClient(std::vector<std::string> endpoints, absl::Duration timeout,
                 std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);
  ~GrpcEtcdClient() override;

  absl::StatusOr<std::optional<coordination::EtcdKey>> Get(const std::string& key) override;
  absl::StatusOr<int64_t> GrantLease(absl::Duration ttl) override;
  absl::Status RevokeLease(int64_t lease) override;
  absl::StatusOr<absl::Duration> KeepAlive(int64_t lease) override;
  absl::StatusOr<coordination::EtcdKey> CreateIfAbsent(const std::string& key,
                                                       const std::string& value,
                                                       int64_t lease) override;

 private:
  struct Endpoint;
  // Runs `call` against each endpoint, starting with `current_`, until one answers (any status
  // but UNAVAILABLE / DEADLINE_EXCEEDED) or the deadline passed; returns the last status then.
  template <typename Call>
  absl::Status OnAnyEndpoint(const char* what, Call call);

  const absl::Duration timeout_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  size_t current_ = 0;
};

}  // namespace ard::rpc
