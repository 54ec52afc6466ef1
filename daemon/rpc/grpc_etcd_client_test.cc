// GrpcEtcdClient against a real gRPC server on loopback that answers etcd's LeaseKeepAlive, and a
// listener that accepts connections and never answers (an etcd member that hangs).
#include "daemon/rpc/grpc_etcd_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "catch2/catch.hpp"
#include "grpcpp/grpcpp.h"

namespace ard::rpc {
namespace {

class Lease final : public etcdserverpb::Lease::Service {
 public:
  grpc::Status LeaseKeepAlive(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<etcdserverpb::LeaseKeepAliveResponse,
                               etcdserverpb::LeaseKeepAliveRequest>* stream) override {
    etcdserverpb::LeaseKeepAliveRequest request;
    while (stream->Read(&request)) {
      etcdserverpb::LeaseKeepAliveResponse response;
      response.set_id(request.id());
      response.set_ttl(3);
      stream->Write(response);
    }
    return grpc::Status::OK;
  }
};

// Accepts TCP connections (the kernel completes them from the backlog) and never speaks HTTP/2.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(fd_, 16) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    address_ = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  }
  ~SilentListener() { ::close(fd_); }
  const std::string& address() const { return address_; }

 private:
  int fd_ = -1;
  std::string address_;
};

TEST_CASE("an etcd member that hangs costs one call, then the next member answers") {
  Lease lease;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&lease);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  SilentListener silent;

  // The hanging member first: it takes the whole deadline of the first call.
  GrpcEtcdClient client({silent.address(), "127.0.0.1:" + std::to_string(port)},
                        absl::Milliseconds(300));
  absl::StatusOr<absl::Duration> first = client.KeepAlive(7);
  CHECK_FALSE(first.ok());
  CHECK(absl::IsDeadlineExceeded(first.status()));
  CHECK(std::string(first.status().message()).find(silent.address()) != std::string::npos);
  // The next call starts at the other member and stays with it.
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<absl::Duration> next = client.KeepAlive(7);
    REQUIRE(next.ok());
    CHECK(*next == absl::Seconds(3));
  }
  server->Shutdown();
}

}  // namespace
}  // namespace ard::rpc
