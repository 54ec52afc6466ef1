#include "daemon/rpc/grpc_etcd_client.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "daemon/rpc/status_util.h"
#include "grpcpp/grpcpp.h"

namespace ard::rpc {

struct GrpcEtcdClient::Endpoint {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<etcdserverpb::KV::Stub> kv;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease;
};

namespace {

bool Unreachable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

coordination::EtcdKey FromKeyValue(const etcdserverpb::KeyValue& kv) {
  return coordination::EtcdKey{kv.value(), kv.create_revision(), kv.lease()};
}

}  // namespace

GrpcEtcdClient::GrpcEtcdClient(std::vector<std::string> endpoints, absl::Duration timeout,
                               std::shared_ptr<grpc::ChannelCredentials> credentials)
    : timeout_(timeout) {
  if (credentials == nullptr) credentials = grpc::InsecureChannelCredentials();
  for (std::string& address : endpoints) {
    auto endpoint = std::make_unique<Endpoint>();
    endpoint->address = std::move(address);
    endpoint->channel = grpc::CreateChannel(endpoint->address, credentials);
    endpoint->kv = etcdserverpb::KV::NewStub(endpoint->channel);
    endpoint->lease = etcdserverpb::Lease::NewStub(endpoint->channel);
    endpoints_.push_back(std::move(endpoint));
  }
}

GrpcEtcdClient::~GrpcEtcdClient() = default;

template <typename Call>
absl::Status GrpcEtcdClient::OnAnyEndpoint(const char* what, Call call) {
  absl::Status last = absl::UnavailableError("etcd: no endpoints");
  // One deadline for the whole call, whichever endpoints it tries: the elector's timing relies
  // on a call taking at most `timeout_`.
  const absl::Time deadline = absl::Now() + timeout_;
  const size_t first = current_;
  for (size_t tried = 0; tried < endpoints_.size() && absl::Now() < deadline; ++tried) {
    const size_t index = (first + tried) % endpoints_.size();
    Endpoint& endpoint = *endpoints_[index];
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(deadline));
    last = FromGrpcStatus(call(endpoint, context));
    if (!Unreachable(last)) {
      current_ = index;
      return last;
    }
    last = absl::Status(last.code(),
                        absl::StrCat("etcd ", endpoint.address, ": ", what, ": ", last.message()));
  }
  // None answered in time: the next call starts at the next endpoint, so that one which hangs
  // (and takes the whole deadline) is not the first tried again and again.
  current_ = (first + 1) % endpoints_.size();
  return last;
}

absl::StatusOr<std::optional<coordination::EtcdKey>> GrpcEtcdClient::Get(const std::string& key) {
  etcdserverpb::RangeRequest request;
  request.set_key(key);
  etcdserverpb::RangeResponse response;
  absl::Status status = OnAnyEndpoint("Range", [&](Endpoint& e, grpc::ClientContext& context) {
    return e.kv->Range(&context, request, &response);
  });
  if (!status.ok()) return status;
  if (response.kvs_size() == 0) return std::optional<coordination::EtcdKey>();
  return std::optional<coordination::EtcdKey>(FromKeyValue(response.kvs(0)));
}

absl::StatusOr<int64_t> GrpcEtcdClient::GrantLease(absl::Duration ttl) {
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(ttl))));
  etcdserverpb::LeaseGrantResponse response;
  absl::Status status = OnAnyEndpoint("LeaseGrant", [&](Endpoint& e, grpc::ClientContext& context) {
    return e.lease->LeaseGrant(&context, request, &response);
  });
  if (!status.ok()) return status;
  if (!response.error().empty()) {
    return absl::FailedPreconditionError(absl::StrCat("etcd LeaseGrant: ", response.error()));
  }
  return response.id();
}

absl::Status GrpcEtcdClient::RevokeLease(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  return OnAnyEndpoint("LeaseRevoke", [&](Endpoint& e, grpc::ClientContext& context) {
    return e.lease->LeaseRevoke(&context, request, &response);
  });
}

// LeaseKeepAlive is a stream in etcd's API; one renewal is one short stream (the coordinator
// renews a few times per TTL, so a long-lived stream would save little and add a reader).
absl::StatusOr<absl::Duration> GrpcEtcdClient::KeepAlive(int64_t lease) {
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseKeepAliveResponse response;
  absl::Status status =
      OnAnyEndpoint("LeaseKeepAlive", [&](Endpoint& e, grpc::ClientContext& context) {
        auto stream = e.lease->LeaseKeepAlive(&context);
        const bool answered =
            stream->Write(request) && stream->WritesDone() && stream->Read(&response);
        grpc::Status finished = stream->Finish();
        if (!finished.ok() || answered) return finished;
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the stream ended without an answer");
      });
  if (!status.ok()) return status;
  if (response.ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " has expired"));
  }
  return absl::Seconds(response.ttl());
}

absl::StatusOr<coordination::EtcdKey> GrpcEtcdClient::CreateIfAbsent(const std::string& key,
                                                                     const std::string& value,
                                                                     int64_t lease) {
  etcdserverpb::TxnRequest request;
  etcdserverpb::Compare* absent = request.add_compare();
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_key(key);
  absent->set_create_revision(0);
  etcdserverpb::PutRequest* put = request.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  request.add_failure()->mutable_request_range()->set_key(key);
  etcdserverpb::TxnResponse response;
  absl::Status status = OnAnyEndpoint("Txn", [&](Endpoint& e, grpc::ClientContext& context) {
    return e.kv->Txn(&context, request, &response);
  });
  if (!status.ok()) return status;
  // Created: the transaction's revision is the key's create revision.
  if (response.succeeded())
    return coordination::EtcdKey{value, response.header().revision(), lease};
  for (const etcdserverpb::ResponseOp& op : response.responses()) {
    if (op.has_response_range() && op.response_range().kvs_size() > 0) {
      return FromKeyValue(op.response_range().kvs(0));
    }
  }
  // The holder's lease expired between the compare and the read: nobody holds it now.
  return absl::UnavailableError(absl::StrCat("etcd Txn: ", key, " vanished; campaign again"));
}

}  // namespace ard::rpc
