#include "ctl/admin_main.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "grpcpp/create_channel.h"
#include "proto/admin.grpc.pb.h"

namespace ard::ctl {

int AdminMain(const std::string& command, const std::string& target,
              const std::string& admin_socket, const std::string& daemon,
              const tls::CredentialFiles& tls, int timeout_ms, bool tcp) {
  const bool use_tcp = tcp || !tls.cert_file.empty() || !tls.ca_file.empty();
  std::string socket = admin_socket;
  if (socket.empty()) {
    const char* env = std::getenv("ALLREDUCED_ADMIN_SOCKET");
    socket = env != nullptr && *env != '\0' ? env : kDefaultAdminSocket;
  }
  const std::string where = use_tcp ? daemon : socket;
  std::shared_ptr<grpc::Channel> channel;
  if (use_tcp) {  // MakeChannelCredentials: plaintext without TLS files
    auto credentials = tls::MakeChannelCredentials(tls);
    if (!credentials.ok()) {
      std::fprintf(stderr, "allreducectl: %s\n",
                   std::string(credentials.status().message()).c_str());
      return 1;
    }
    channel = grpc::CreateChannel(daemon, *credentials);
  } else {
    channel = grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials());
  }
  auto stub = Admin::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  grpc::Status status;
  std::string done;
  if (command == "forget") {
    ForgetHostRequest request;
    request.set_host(target);
    ForgetHostResponse response;
    status = stub->ForgetHost(&context, request, &response);
    done = "forgot host " + target + " (membership epoch " +
           std::to_string(response.membership_epoch()) + ")";
  } else {
    AbortJobRequest request;
    request.set_job(target);
    AbortJobResponse response;
    status = stub->AbortJob(&context, request, &response);
    done = "aborted: " + response.reason() + " (failed by host " + response.host() + ")";
  }
  if (!status.ok()) {
    const bool unreachable = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    std::fprintf(stderr, "allreducectl: %s %s: %s%s\n", command.c_str(), target.c_str(),
                 unreachable ? ("cannot reach the daemon at " + where + ": ").c_str() : "",
                 status.error_message().c_str());
    return 1;
  }
  std::printf("%s\n", done.c_str());
  return 0;
}

}  // namespace ard::ctl
