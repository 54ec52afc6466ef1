// The GPU path through the real daemon (host-memory device double, real local socket) when a
// process misbehaves: bad registrations and a process hanging up mid-job fail that process or
// that job, and the daemon closes the IPC mappings; a sticky CUDA error stops the daemon.
//
// All simulated processes share this test's real pid (SO_PEERCRED), so the daemon's IpcCache,
// keyed by pid, closes their mappings when the last of them leaves.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "catch2/catch.hpp"
#include "daemon/daemon.h"
#include "daemon/gpu/testing/fake_process.h"
#include "daemon/gpu/testing/host_device.h"
#include "daemon/gpu_daemon_fixtures.h"
#include "daemon/gpu_wire_client.h"
#include "proto/local_wire.h"

namespace ard {
namespace {

using gpu::testing::FakeProcess;
using gpu::testing::HostDevice;
using gpu::testing::HostWorld;
using testing::Config;
using testing::Eventually;
using testing::OneDaemon;
using testing::Reply;
using testing::TempDir;
using testing::WireClient;

TEST_CASE("GPU path: bad registrations are refused to that process only") {
  TempDir dir;
  HostWorld world;
  HostDevice device(world, "h", 1, 1);
  Daemon daemon(Config(dir), &device);
  REQUIRE(daemon.Start().ok());
  const std::string sock = dir.path() + "/h.sock";
  FakeProcess p0(world, "h", 100, 1, 0, 0), p1(world, "h", 101, 1, 0, 1);
  WireClient c0(sock, "bad", 0, 2), c1(sock, "bad", 1, 2);
  c0.Expect(wire::MsgType::kWelcome);
  c1.Expect(wire::MsgType::kWelcome);

  // A GPU the daemon does not have.
  gpu::GpuRegistration wrong = p1.Registration();
  wrong.device = 3;
  c1.Register(wrong, 1);
  Reply r1 = c1.Next();
  CHECK(r1.type == wire::MsgType::kError);
  CHECK(r1.request_id == 1);
  CHECK_THAT(r1.message, Catch::Contains("GPU 3 does not exist"));
  // A stale handle: memory the process already freed.
  gpu::GpuRegistration stale = p1.Registration();
  p1.FreeArena();
  c1.Register(stale, 2);
  Reply r2 = c1.Next();
  CHECK(r2.type == wire::MsgType::kError);
  CHECK(r2.code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));

  // GPU_SUBMIT before every rank registered.
  c0.Register(p0.Registration(), 3);
  c0.Submit(4, "early", wire::DataType::kFloat32, wire::ReduceOp::kSum, 1, 0, 0);
  Reply early = c0.Expect(wire::MsgType::kComplete);
  CHECK(early.code == static_cast<int32_t>(absl::StatusCode::kFailedPrecondition));
  CHECK_THAT(early.message, Catch::Contains("registered its GPU"));
  daemon.Shutdown();
}

TEST_CASE_METHOD(
    OneDaemon,
    "GPU path: a process hanging up mid-job fails the job and its IPC handles are closed") {
  FakeProcess p0(world, "h", 100, 2, 0, 0), p1(world, "h", 101, 2, 1, 1);
  auto c0 = std::make_unique<WireClient>(sock, "hang", 0, 2);
  auto c1 = std::make_unique<WireClient>(sock, "hang", 1, 2);
  c0->Expect(wire::MsgType::kWelcome);
  c1->Expect(wire::MsgType::kWelcome);
  c0->Register(p0.Registration(), 1);
  c1->Register(p1.Registration(), 1);
  REQUIRE(c0->Next().type == wire::MsgType::kGpuRegistered);
  REQUIRE(c1->Next().type == wire::MsgType::kGpuRegistered);
  CHECK(device.open_mappings() == 2);
  // One allreduce works.
  p0.Submit<float>(0, {1.0f, 2.0f}, 0);
  p1.Submit<float>(0, {10.0f, 20.0f}, 0);
  c0->Submit(4, "w", wire::DataType::kFloat32, wire::ReduceOp::kSum, 2, 0, 0);
  c1->Submit(4, "w", wire::DataType::kFloat32, wire::ReduceOp::kSum, 2, 0, 0);
  REQUIRE(c0->Expect(wire::MsgType::kComplete).code == 0);
  REQUIRE(c1->Expect(wire::MsgType::kComplete).code == 0);
  CHECK(p1.Result<float>(0, 2, 0) == std::vector<float>{11.0f, 22.0f});

  // Rank 0 submits; rank 1 hangs up before submitting its part.
  p0.Submit<float>(0, {1.0f, 2.0f}, 0);
  c0->Submit(5, "t", wire::DataType::kFloat32, wire::ReduceOp::kSum, 2, 0, 0);
  c1->HangUp();
  Reply done = c0->Expect(wire::MsgType::kComplete);
  CHECK(done.request_id == 5);
  CHECK(done.code == static_cast<int32_t>(absl::StatusCode::kAborted));
  CHECK_THAT(done.message, Catch::Contains("rank 1"));
  // The job is over for rank 0 too: its next submit gets the failure.
  c0->Submit(6, "u", wire::DataType::kFloat32, wire::ReduceOp::kSum, 2, 0, 0);
  CHECK(c0->Expect(wire::MsgType::kComplete).code ==
        static_cast<int32_t>(absl::StatusCode::kAborted));
  // Both simulated processes share this test's pid: the mappings close with the last of them.
  c0.reset();
  CHECK(Eventually([&] { return device.open_mappings() == 0; }));
  daemon.Shutdown();
}

// Item 6, the daemon's part: a sticky CUDA error (here: a process freed its staging memory and
// the daemon's copy from it is an illegal address) leaves the context unusable for the rest of
// the process. Every job on the daemon fails naming the cause, then the daemon stops itself
// (its fatal handler; allreduced then exits 4 and systemd restarts it).
TEST_CASE("GPU path: a sticky CUDA error fails every job, then the daemon stops for a restart") {
  TempDir dir;
  HostWorld world;
  HostDevice device(world, "h", 1, 1);
  DaemonConfig config = Config(dir);
  config.set_stall_warning_ms(1000);  // inspected with stalls: every 250 ms
  Daemon daemon(config, &device);
  absl::Notification stopped;
  absl::Status why;
  daemon.SetFatalHandler([&](const absl::Status& s) {
    why = s;
    stopped.Notify();
  });
  REQUIRE(daemon.Start().ok());
  const std::string sock = dir.path() + "/h.sock";
  FakeProcess p0(world, "h", 100, 1, 0, 0), p1(world, "h", 101, 1, 0, 1);
  WireClient c0(sock, "poisoned", 0, 2), c1(sock, "poisoned", 1, 2);
  WireClient bystander(sock, "cpu-only", 0, 1);
  c0.Expect(wire::MsgType::kWelcome);
  c1.Expect(wire::MsgType::kWelcome);
  bystander.Expect(wire::MsgType::kWelcome);
  c0.Register(p0.Registration(), 1);
  c1.Register(p1.Registration(), 1);
  REQUIRE(c0.Next().type == wire::MsgType::kGpuRegistered);
  REQUIRE(c1.Next().type == wire::MsgType::kGpuRegistered);
  CHECK(device.Lost().ok());

  p0.Submit<float>(0, {1.0f}, 0);
  p1.FreeArena();
  c0.Submit(2, "t", wire::DataType::kFloat32, wire::ReduceOp::kSum, 1, 0, 0);
  c1.Submit(2, "t", wire::DataType::kFloat32, wire::ReduceOp::kSum, 1, 0, 0);
  CHECK(c0.Expect(wire::MsgType::kComplete).code != 0);
  CHECK_FALSE(device.Lost().ok());

  REQUIRE(stopped.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(gpu::IsStickyError(why));
  CHECK_THAT(std::string(why.message()), Catch::Contains("GPU context is unusable"));
  CHECK_THAT(std::string(why.message()), Catch::Contains("illegal memory access"));
  // A job that never touched the GPU hears why too: the daemon it runs on restarts.
  Reply told = bystander.Expect(wire::MsgType::kNotify);
  CHECK_THAT(told.message, Catch::Contains("GPU context is unusable"));
  daemon.Shutdown();
}

}  // namespace
}  // namespace ard
