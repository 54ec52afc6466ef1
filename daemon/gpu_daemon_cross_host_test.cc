// The GPU path across two real daemons (host-memory device doubles in one simulated cluster, real
// gRPC negotiation and TCP data plane on loopback), in both GPU plans: one NCCL communicator
// spanning the hosts, and hierarchical.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "proto/local_wire.h"
#include "daemon/gpu/testing/fake_process.h"
#include "daemon/gpu_daemon_fixtures.h"
#include "daemon/gpu_wire_client.h"

namespace ard {
namespace {

using gpu::testing::FakeProcess;
using testing::Eventually;
using testing::Meta;
using testing::Reply;
using testing::StatusDevices;
using testing::StatusGpuPlan;
using testing::TwoDaemons;
using testing::WireClient;

// Two daemons ("hosts" a and b, real gRPC negotiation and TCP data plane on loopback), each on
// its own device double in one simulated cluster: ranks 0 and 1 on a's GPUs 0 and 1, rank 2 on b's
// GPU 0. The GPUs register after the job formed; the coordinator's second round gives both hosts
// the same plan. "auto": one communicator spans the three GPUs (same NCCL on both hosts).
// "hierarchical" on host b alone: both hosts run hierarchical (a communicator per host, the TCP
// mesh between them, on the data-plane executor in the committed order with CPU tensors).
TEST_CASE("GPU allreduce across two daemons, NCCL-spanning and hierarchical") {
  const std::string b_mode = GENERATE(std::string("auto"), std::string("hierarchical"));
  INFO("host b gpu_mode=" << b_mode);
  TwoDaemons hosts(b_mode);

  struct Rank {
    std::string host;
    int device, local_rank, local_size;
  };
  const std::vector<Rank> ranks = {{"a", 0, 0, 2}, {"a", 1, 1, 2}, {"b", 0, 0, 1}};
  std::vector<std::unique_ptr<FakeProcess>> procs;
  std::vector<std::unique_ptr<WireClient>> clients;
  for (int r = 0; r < 3; ++r) {
    const Rank& k = ranks[r];
    procs.push_back(std::make_unique<FakeProcess>(hosts.world, k.host, 100 + r,
                                                  k.host == "a" ? 2 : 1, k.device, r));
    clients.push_back(std::make_unique<WireClient>(hosts.socket(k.host), "xjob", r, 3, k.local_rank,
                                                   k.local_size));
  }
  for (auto& c : clients) c->Expect(wire::MsgType::kWelcome);
  for (int r = 0; r < 3; ++r) clients[r]->Register(procs[r]->Registration(), 5);
  for (auto& c : clients) {
    Reply reg = c->Next();
    INFO(reg.message);
    REQUIRE(reg.type == wire::MsgType::kGpuRegistered);
  }
  CHECK(Eventually([&] { return StatusDevices(*hosts.a, "xjob", "a") == std::vector<int>{0, 1}; }));
  CHECK(Eventually([&] { return StatusDevices(*hosts.b, "xjob", "b") == std::vector<int>{0}; }));
  CHECK_THAT(StatusGpuPlan(*hosts.a, "xjob"),
             Catch::StartsWith(b_mode == "auto" ? "nccl: 3 communicator ranks"
                                                : "hierarchical: 2 communicator ranks"));

  for (int step = 0; step < 3; ++step) {
    for (int r = 0; r < 3; ++r) {
      procs[r]->Submit<float>(0, {1.0f + r + step, -2.0f * r}, 0);
      procs[r]->Submit<int32_t>(256, {10 * r + step, 7 - r}, 1);
      procs[r]->Submit<double>(512, {3.0 * r}, 2);
      clients[r]->Submit(10 * step + 1, "f", wire::DataType::kFloat32, wire::ReduceOp::kSum, 2, 0,
                         0);
      clients[r]->Submit(10 * step + 2, "i", wire::DataType::kInt32, wire::ReduceOp::kMin, 2, 256,
                         1);
      clients[r]->Submit(10 * step + 3, "d", wire::DataType::kFloat64, wire::ReduceOp::kAverage, 1,
                         512, 2);
      // A host tensor of the same job, between the GPU ones: its data plane shares the job's one
      // committed order (and TCP mesh) with the GPU responses.
      clients[r]->SubmitHost(10 * step + 4, "h", {1.0f * r + step, 1.0f});
    }
    for (int r = 0; r < 3; ++r) {
      std::set<uint64_t> completed;
      for (int k = 1; k <= 4; ++k) {
        Reply done = clients[r]->Expect(wire::MsgType::kComplete);
        INFO("rank " << r << ": " << done.message);
        REQUIRE(done.code == 0);
        completed.insert(done.request_id);
        if (done.request_id == static_cast<uint64_t>(10 * step + 4)) {
          CHECK(clients[r]->HostResult(done, 2) == std::vector<float>{3.0f + 3 * step, 3.0f});
        }
      }
      CHECK(completed.size() == 4);
      CHECK(procs[r]->Result<float>(0, 2, 0) == std::vector<float>{6.0f + 3 * step, -6.0f});
      CHECK(procs[r]->Result<int32_t>(256, 2, 1) == std::vector<int32_t>{step, 5});
      CHECK(procs[r]->Result<double>(512, 1, 2) == std::vector<double>{3.0});
    }
  }

  // b's only rank hangs up (a crash: no BYE), which fails the job on every host at once; a's
  // ranks then submit a tensor that needs it: both get the failure, naming it, instead of hanging
  // in a communicator.
  clients[2]->HangUp();
  for (int r = 0; r < 2; ++r) {
    procs[r]->Submit<float>(0, {1.0f, 1.0f}, 0);
    clients[r]->Submit(100, "f", wire::DataType::kFloat32, wire::ReduceOp::kSum, 2, 0, 0);
  }
  for (int r = 0; r < 2; ++r) {
    Reply failed = clients[r]->Expect(wire::MsgType::kComplete);
    CHECK(failed.code != 0);
    CHECK_THAT(failed.message, Catch::Contains("rank 2 (pid") && Catch::Contains("on host b"));
  }
  clients.clear();
  CHECK(Eventually(
      [&] { return hosts.device_a.open_mappings() == 0 && hosts.device_b.open_mappings() == 0; }));
}

// The other collectives across the same two daemons (ranks 0, 1 on a's GPUs 0, 1; rank 2 on b's
// GPU 0), in both plans: one communicator spanning the hosts, and hierarchical (host buffers
// summed over the TCP mesh).
TEST_CASE(
    "GPU broadcast, allgather, reducescatter across two daemons, NCCL-spanning and "
    "hierarchical") {
  const std::string b_mode = GENERATE(std::string("auto"), std::string("hierarchical"));
  INFO("host b gpu_mode=" << b_mode);
  TwoDaemons hosts(b_mode);
  const std::vector<std::string> host = {"a", "a", "b"};
  std::vector<std::unique_ptr<FakeProcess>> procs;
  std::vector<std::unique_ptr<WireClient>> clients;
  for (int r = 0; r < 3; ++r) {
    const bool on_a = host[r] == "a";
    procs.push_back(std::make_unique<FakeProcess>(hosts.world, host[r], 100 + r, on_a ? 2 : 1,
                                                  on_a ? r : 0, r));
    clients.push_back(std::make_unique<WireClient>(hosts.socket(host[r]), "xcoll", r, 3,
                                                   on_a ? r : 0, on_a ? 2 : 1));
  }
  for (auto& c : clients) c->Expect(wire::MsgType::kWelcome);
  for (int r = 0; r < 3; ++r) clients[r]->Register(procs[r]->Registration(), 5);
  for (auto& c : clients) REQUIRE(c->Next().type == wire::MsgType::kGpuRegistered);
  using wire::Collective;
  using wire::DataType;
  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    wire::Submit bcast = Meta(Collective::kBroadcast, "bcast", DataType::kInt64, {2});
    bcast.root_rank = 2;  // on host b
    wire::Submit gather = Meta(Collective::kAllgather, "gather", DataType::kInt32, {1, 2});
    wire::Submit scatter = Meta(Collective::kReducescatter, "scatter", DataType::kFloat32, {4});
    scatter.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kAverage);
    scatter.prescale = 3;
    scatter.postscale = 2;
    for (int r = 0; r < 3; ++r) {
      procs[r]->Submit<int64_t>(0, {100 * r + step, -r}, 0);
      procs[r]->Submit<int32_t>(256, {r, 10 * r + step}, 1);
      procs[r]->Submit<float>(512, {1.0f * r, 2, 3, 4.0f + step}, 2);
      clients[r]->SubmitMeta(1, bcast, 0, 0);
      clients[r]->SubmitMeta(2, gather, 256, 1);
      clients[r]->SubmitMeta(3, scatter, 512, 2);
    }
    // Reducescatter of 4 rows over 3 ranks: blocks of 2, 1, 1; the average of the inputs x 3 x 2.
    const std::vector<std::vector<float>> block = {{6, 12}, {18}, {6.0f * (4 + step)}};
    for (int r = 0; r < 3; ++r) {
      std::vector<std::vector<int64_t>> shapes(4);
      for (int k = 0; k < 3; ++k) {
        Reply done = clients[r]->Expect(wire::MsgType::kComplete);
        INFO("rank " << r << ": " << done.message);
        REQUIRE(done.code == 0);
        shapes[done.request_id] = done.shape;
      }
      CHECK(shapes[1] == std::vector<int64_t>{2});
      CHECK(shapes[2] == std::vector<int64_t>{3, 2});
      CHECK(shapes[3] == std::vector<int64_t>{r == 0 ? 2 : 1});
      CHECK(procs[r]->Result<int64_t>(0, 2, 0) == std::vector<int64_t>{200 + step, -2});
      CHECK(procs[r]->Result<int32_t>(256, 6, 1) ==
            std::vector<int32_t>{0, step, 1, 10 + step, 2, 20 + step});
      CHECK(procs[r]->Result<float>(512, block[r].size(), 2) == block[r]);
    }
  }
  clients.clear();
  CHECK(Eventually(
      [&] { return hosts.device_a.open_mappings() == 0 && hosts.device_b.open_mappings() == 0; }));
}

}  // namespace
}  // namespace ard
