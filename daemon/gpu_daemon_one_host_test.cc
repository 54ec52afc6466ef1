// The GPU path through the real daemon code (DESIGN.md "GPU path"), one host: a Daemon built with
// the host-memory device double (daemon/gpu/testing) serves simulated GPU training processes over
// its real local socket: HELLO/WELCOME, GPU_REGISTER/GPU_REGISTERED, GPU_SUBMIT/COMPLETE, with the
// process's staging arena and pool events on the double. The daemon's readiness table, GPU
// executor and GpuJob run as in production; only CUDA/NCCL are simulated.
//
// All simulated processes share this test's real pid (SO_PEERCRED), so the daemon's IpcCache,
// keyed by pid, closes their mappings when the last of them leaves.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "catch2/catch.hpp"
#include "daemon/gpu/testing/fake_process.h"
#include "daemon/gpu_daemon_fixtures.h"
#include "daemon/gpu_wire_client.h"
#include "proto/local_wire.h"

namespace ard {
namespace {

using gpu::testing::FakeProcess;
using testing::Eventually;
using testing::Meta;
using testing::OneDaemon;
using testing::Reply;
using testing::StatusDevices;
using testing::WireClient;

TEST_CASE_METHOD(OneDaemon,
                 "GPU allreduce through the daemon: three processes on two GPUs, fused, repeated") {
  // Ranks 0 and 2 share GPU 0: they are reduced through host memory before the communicator.
  std::vector<std::unique_ptr<FakeProcess>> procs;
  std::vector<std::unique_ptr<WireClient>> clients;
  const std::vector<int> gpu_of = {0, 1, 0};
  for (int r = 0; r < 3; ++r) {
    procs.push_back(std::make_unique<FakeProcess>(world, "h", 100 + r, 2, gpu_of[r], r));
    clients.push_back(std::make_unique<WireClient>(sock, "gjob", r, 3));
  }
  for (auto& c : clients) c->Expect(wire::MsgType::kWelcome);
  for (int r = 0; r < 3; ++r) clients[r]->Register(procs[r]->Registration(), 7);
  for (auto& c : clients) {
    Reply reg = c->Next();
    INFO(reg.message);
    REQUIRE(reg.type == wire::MsgType::kGpuRegistered);
    CHECK(reg.request_id == 7);
  }
  CHECK(device.memory_opens() == 3);  // one mapping per process arena
  // Item 8: the GPUs' contexts were made at daemon start, not by those opens on the control loop.
  CHECK(device.lazy_contexts() == 0);
  CHECK(Eventually([&] { return StatusDevices(daemon, "gjob") == gpu_of; }));

  for (int step = 0; step < 3; ++step) {
    for (int r = 0; r < 3; ++r) {
      procs[r]->Submit<float>(0, {1.0f * (r + 1) + step, 10.0f * (r + 1)}, 0);
      procs[r]->Submit<int32_t>(256, {r * 7 - 5 + step}, 1);
      procs[r]->Submit<float>(1024, {3.0f * r, 6.0f, 9.0f}, 2);
      clients[r]->Submit(10 * step + 1, "a", wire::DataType::kFloat32, wire::ReduceOp::kSum, 2, 0,
                         0);
      clients[r]->Submit(10 * step + 2, "b", wire::DataType::kInt32, wire::ReduceOp::kMax, 1, 256,
                         1);
      clients[r]->Submit(10 * step + 3, "c", wire::DataType::kFloat32, wire::ReduceOp::kAverage, 3,
                         1024, 2);
    }
    for (int r = 0; r < 3; ++r) {
      for (int k = 1; k <= 3; ++k) {
        Reply done = clients[r]->Expect(wire::MsgType::kComplete);
        INFO(done.message);
        REQUIRE(done.code == 0);
        CHECK(done.request_id == static_cast<uint64_t>(10 * step + k));
        CHECK(done.shape.size() == 1);
      }
      CHECK(procs[r]->Result<float>(0, 2, 0) == std::vector<float>{6.0f + 3 * step, 60.0f});
      CHECK(procs[r]->Result<int32_t>(256, 1, 1) == std::vector<int32_t>{9 + step});
      CHECK(procs[r]->Result<float>(1024, 3, 2) == std::vector<float>{3.0f, 6.0f, 9.0f});
    }
  }
  CHECK(device.memory_opens() == 3);  // cached: opened once, not per collective

  // Bad input from one process is that process's error: an event index outside its pool.
  procs[1]->Submit<float>(0, {1.0f}, 0);
  clients[1]->Submit(99, "bad", wire::DataType::kFloat32, wire::ReduceOp::kSum, 1, 0, 9);
  Reply bad = clients[1]->Expect(wire::MsgType::kComplete);
  CHECK(bad.code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  CHECK_THAT(bad.message, Catch::Contains("event"));

  clients.clear();  // every process leaves: the daemon closes their IPC mappings
  CHECK(Eventually([&] { return device.open_mappings() == 0; }));
  daemon.Shutdown();
}

TEST_CASE_METHOD(
    OneDaemon, "GPU broadcast, allgather, reducescatter and scaled allreduce through the daemon") {
  std::vector<std::unique_ptr<FakeProcess>> procs;
  std::vector<std::unique_ptr<WireClient>> clients;
  const std::vector<int> gpu_of = {0, 1, 0};  // ranks 0 and 2 share GPU 0
  for (int r = 0; r < 3; ++r) {
    procs.push_back(std::make_unique<FakeProcess>(world, "h", 100 + r, 2, gpu_of[r], r));
    clients.push_back(std::make_unique<WireClient>(sock, "coll", r, 3));
  }
  for (auto& c : clients) c->Expect(wire::MsgType::kWelcome);
  for (int r = 0; r < 3; ++r) clients[r]->Register(procs[r]->Registration(), 1);
  for (auto& c : clients) REQUIRE(c->Next().type == wire::MsgType::kGpuRegistered);
  using wire::Collective;
  using wire::DataType;

  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    // Broadcast from rank 1 of a [2, 2] int32 tensor.
    wire::Submit bcast = Meta(Collective::kBroadcast, "bcast", DataType::kInt32, {2, 2});
    bcast.root_rank = 1;
    // Allgather of [1, 2] float16 (as raw halves) per rank: the result is [3, 2].
    wire::Submit gather = Meta(Collective::kAllgather, "gather", DataType::kFloat16, {1, 2});
    // Reducescatter of [5] float: blocks of 2, 2, 1 rows; average, prescale 2, postscale 10.
    wire::Submit scatter = Meta(Collective::kReducescatter, "scatter", DataType::kFloat32, {5});
    scatter.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kAverage);
    scatter.prescale = 2;
    scatter.postscale = 10;
    // Allreduce of [2] float64 with prescale 0.5, postscale 4.
    wire::Submit scaled = Meta(Collective::kAllreduce, "scaled", DataType::kFloat64, {2});
    scaled.prescale = 0.5;
    scaled.postscale = 4;
    for (int r = 0; r < 3; ++r) {
      procs[r]->Submit<int32_t>(0, {r, r + step, -r, 100 * r}, 0);
      procs[r]->Submit<uint16_t>(256, {uint16_t(r + 1), uint16_t(0x3c00 + r)}, 1);
      procs[r]->Submit<float>(1024, {1.0f + r, 2, 3, 4, 5.0f * r}, 2);
      procs[r]->Submit<double>(2048, {1.0 + r + step, -2}, 3);
      clients[r]->SubmitMeta(1, bcast, 0, 0);
      clients[r]->SubmitMeta(2, gather, 256, 1);
      clients[r]->SubmitMeta(3, scatter, 1024, 2);
      clients[r]->SubmitMeta(4, scaled, 2048, 3);
    }
    const std::vector<std::vector<int64_t>> scatter_shapes = {{2}, {2}, {1}};
    for (int r = 0; r < 3; ++r) {
      std::vector<std::vector<int64_t>> shapes(5);
      for (int k = 0; k < 4; ++k) {
        Reply done = clients[r]->Expect(wire::MsgType::kComplete);
        INFO(done.message);
        REQUIRE(done.code == 0);
        shapes[done.request_id] = done.shape;
      }
      CHECK(shapes[1] == std::vector<int64_t>{2, 2});
      CHECK(shapes[2] == std::vector<int64_t>{3, 2});
      CHECK(shapes[3] == scatter_shapes[r]);
      CHECK(shapes[4] == std::vector<int64_t>{2});
      CHECK(procs[r]->Result<int32_t>(0, 4, 0) == std::vector<int32_t>{1, 1 + step, -1, 100});
      CHECK(procs[r]->Result<uint16_t>(256, 6, 1) ==
            std::vector<uint16_t>{1, 0x3c00, 2, 0x3c01, 3, 0x3c02});
      // Sum of inputs x 2 / 3 x 10: {1+2+3, 6, 9, 12, 0+5+10} * 20 / 3.
      const std::vector<std::vector<float>> block = {{40, 40}, {60, 80}, {100}};
      CHECK(procs[r]->Result<float>(1024, block[r].size(), 2) == block[r]);
      CHECK(procs[r]->Result<double>(2048, 2, 3) == std::vector<double>{(6.0 + 3 * step) * 2, -12});
    }
  }

  // Bad input is that process's error: a broadcast root outside the job, an allgather whose
  // result (3 x input) would run past its staging arena.
  wire::Submit root = Meta(Collective::kBroadcast, "root", DataType::kFloat32, {1});
  root.root_rank = 3;
  clients[2]->SubmitMeta(5, root, 0, 0);
  Reply bad_root = clients[2]->Expect(wire::MsgType::kComplete);
  CHECK(bad_root.code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  CHECK_THAT(bad_root.message, Catch::Contains("root rank 3"));
  wire::Submit big = Meta(Collective::kAllgather, "big", DataType::kFloat32, {1024});
  clients[0]->SubmitMeta(6, big, (1 << 16) - 8192, 0);  // input fits, 3 x input does not
  Reply bad_range = clients[0]->Expect(wire::MsgType::kComplete);
  CHECK(bad_range.code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  CHECK_THAT(bad_range.message, Catch::Contains("staging arena"));

  // Unequal first dimensions of a device allgather: that tensor fails on every rank (the
  // mismatch is between ranks), the job goes on.
  for (int r = 0; r < 3; ++r) {
    clients[r]->SubmitMeta(
        7, Meta(Collective::kAllgather, "uneven", DataType::kFloat32, {r == 2 ? 2 : 1}), 0, 0);
  }
  for (int r = 0; r < 3; ++r) {
    Reply uneven = clients[r]->Expect(wire::MsgType::kComplete);
    CHECK(uneven.request_id == 7);
    CHECK(uneven.code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
    CHECK_THAT(uneven.message, Catch::Contains("first dimension must be equal"));
  }
  for (int r = 0; r < 3; ++r) {
    procs[r]->Submit<float>(0, {1.0f + r}, 0);
    clients[r]->Submit(8, "after", DataType::kFloat32, wire::ReduceOp::kSum, 1, 0, 0);
  }
  for (int r = 0; r < 3; ++r) {
    Reply after = clients[r]->Expect(wire::MsgType::kComplete);
    INFO(after.message);
    CHECK(after.code == 0);
    CHECK(procs[r]->Result<float>(0, 1, 0) == std::vector<float>{6});
  }
  clients.clear();
  CHECK(Eventually([&] { return device.open_mappings() == 0; }));
  daemon.Shutdown();
}

}  // namespace
}  // namespace ard
