// A hostile (or confused) cluster peer for tests/fault/hostile_peer_test.py: speaks our gRPC
// protos to a daemon with requests no well-behaved daemon sends, and prints what came back.
//
// Usage: hostile_peer ADDRESS CASE [ARGS...]
// Output, one line: STATUS <grpc code number> <code name> <message>   (unary calls, streams)
//                   VERDICT <HeartbeatResponse verdict name>          (heartbeat, when OK)
// Cases (JOB_ID and HOST from the test, which reads them from `allreducectl status --json`):
//   negotiate JOB_ID HOST          an empty Negotiate for job JOB_ID claiming to be HOST
//   negotiate-garbage JOB_ID HOST  a Negotiate whose tensor has a rank far outside the job
//   negotiate-oversize JOB_ID HOST a Negotiate of 8 MiB (over the 4 MiB message limit)
//   watch JOB_ID HOST              WatchJob; prints the stream's final status
//   register HOST SIZE TIMEOUT_MS  RegisterRanks of one rank for job "hostile" of SIZE ranks
//   join NAME [VERSION]            Join under NAME (address and instance id made up) claiming
//                                  protocol version VERSION (default: this build's)
//   heartbeat HOST INCARNATION     Heartbeat with that incarnation and a made-up instance id
//   leave HOST INCARNATION         Leave with that incarnation and a made-up instance id
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "daemon/common/version.h"
#include "proto/cluster.grpc.pb.h"
#include "proto/negotiation.grpc.pb.h"

namespace {

constexpr const char* kCodeNames[] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

int Print(const grpc::Status& s) {
  const int code = static_cast<int>(s.error_code());
  std::printf("STATUS %d %s %s\n", code, code >= 0 && code <= 16 ? kCodeNames[code] : "?",
              s.error_message().c_str());
  return 0;
}

void Deadline(grpc::ClientContext* context, int seconds = 5) {
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
}

int Usage() {
  std::fprintf(stderr, "usage: hostile_peer ADDRESS CASE [ARGS...] (see the source)\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return Usage();
  const std::string cmd = argv[2];
  auto arg = [&](int i) -> std::string { return 3 + i < argc ? argv[3 + i] : ""; };
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(argv[1], grpc::InsecureChannelCredentials(), args);
  auto negotiation = ard::Negotiation::NewStub(channel);
  auto cluster = ard::Cluster::NewStub(channel);
  grpc::ClientContext context;
  Deadline(&context);

  if (cmd == "negotiate" || cmd == "negotiate-garbage" || cmd == "negotiate-oversize") {
    ard::NegotiateRequest request;
    request.set_job_id(std::strtoull(arg(0).c_str(), nullptr, 10));
    request.set_generation(1);  // a job's first formation
    request.set_host(arg(1));
    if (cmd != "negotiate") {
      ard::HostReadyTensor* t = request.add_ready();
      t->set_name(cmd == "negotiate-oversize" ? std::string(8 << 20, 'x') : "garbage");
      ard::TensorMeta* m = t->add_ranks();
      m->set_rank(1 << 30);
      m->set_collective(1);
      m->set_dtype(9);
      for (int i = 0; i < 100; ++i) m->add_shape(int64_t{1} << 40);
    }
    ard::NegotiateResponse response;
    return Print(negotiation->Negotiate(&context, request, &response));
  }
  if (cmd == "watch") {
    ard::WatchJobRequest request;
    request.set_job_id(std::strtoull(arg(0).c_str(), nullptr, 10));
    request.set_generation(1);  // a job's first formation
    request.set_host(arg(1));
    Deadline(&context, 3);
    auto reader = negotiation->WatchJob(&context, request);
    ard::JobEvent event;
    int events = 0;
    while (reader->Read(&event)) ++events;
    std::printf("EVENTS %d\n", events);
    return Print(reader->Finish());
  }
  if (cmd == "register") {
    ard::RegisterRanksRequest request;
    request.set_job("hostile");
    request.set_host(arg(0));
    request.set_size(std::atoi(arg(1).c_str()));
    request.set_timeout_ms(std::strtoul(arg(2).c_str(), nullptr, 10));
    request.set_data_address("127.0.0.1:1");
    auto* lr = request.add_ranks();
    lr->set_local_rank(0);
    lr->set_rank(-1);
    lr->set_pid(1);
    ard::RegisterRanksResponse response;
    return Print(negotiation->RegisterRanks(&context, request, &response));
  }
  if (cmd == "join") {
    ard::JoinRequest request;
    request.mutable_host()->set_name(arg(0));
    request.mutable_host()->set_address("127.0.0.1:1");
    request.mutable_host()->set_instance_id("hostile-peer");
    request.mutable_host()->set_protocol_version(
        arg(1).empty() ? ard::kProtocolVersion : std::strtoul(arg(1).c_str(), nullptr, 10));
    ard::JoinResponse response;
    return Print(cluster->Join(&context, request, &response));
  }
  if (cmd == "heartbeat") {
    ard::HeartbeatRequest request;
    request.set_host_name(arg(0));
    request.set_incarnation(std::strtoul(arg(1).c_str(), nullptr, 10));
    request.set_instance_id("hostile-peer");
    ard::HeartbeatResponse response;
    grpc::Status s = cluster->Heartbeat(&context, request, &response);
    if (!s.ok()) return Print(s);
    std::printf("VERDICT %s %s\n", ard::HeartbeatResponse::Verdict_Name(response.verdict()).c_str(),
                response.detail().c_str());
    return 0;
  }
  if (cmd == "leave") {
    ard::LeaveRequest request;
    request.set_host_name(arg(0));
    request.set_incarnation(std::strtoul(arg(1).c_str(), nullptr, 10));
    request.set_instance_id("hostile-peer");
    ard::LeaveResponse response;
    return Print(cluster->Leave(&context, request, &response));
  }
  return Usage();
}
