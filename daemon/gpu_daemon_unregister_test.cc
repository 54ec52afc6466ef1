// GPU_UNREGISTER through the real daemon code on the host-memory device double (issue 23, item 6):
// a training process frees its staging arena and events only after GPU_UNREGISTERED, so the daemon
// must answer only once it no longer uses them: the rank's registration is released and, when the
// process holds no other, its IPC mappings are closed.
//
// The simulated processes share this test's pid (SO_PEERCRED), so the mappings close when the last
// of them unregisters.
#include <memory>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "daemon/gpu/testing/fake_process.h"
#include "daemon/gpu_daemon_fixtures.h"
#include "daemon/gpu_wire_client.h"
#include "proto/local_wire.h"

namespace ard {
namespace {

using gpu::testing::FakeProcess;
using testing::OneDaemon;
using testing::Reply;
using testing::WireClient;

TEST_CASE_METHOD(OneDaemon, "GPU_UNREGISTERED comes after the daemon let go of the staging") {
  std::vector<std::unique_ptr<FakeProcess>> procs;
  std::vector<std::unique_ptr<WireClient>> clients;
  for (int r = 0; r < 2; ++r) {
    procs.push_back(std::make_unique<FakeProcess>(world, "h", 100 + r, 2, r, r));
    clients.push_back(std::make_unique<WireClient>(sock, "ujob", r, 2));
  }
  for (auto& c : clients) c->Expect(wire::MsgType::kWelcome);
  for (int r = 0; r < 2; ++r) clients[r]->Register(procs[r]->Registration(), 7);
  for (auto& c : clients) REQUIRE(c->Next().type == wire::MsgType::kGpuRegistered);
  for (int r = 0; r < 2; ++r) {
    procs[r]->Submit<float>(0, {1.0f + r}, 0);
    clients[r]->Submit(1, "a", wire::DataType::kFloat32, wire::ReduceOp::kSum, 1, 0, 0);
  }
  for (int r = 0; r < 2; ++r) {
    Reply done = clients[r]->Expect(wire::MsgType::kComplete);
    INFO(done.message);
    REQUIRE(done.code == 0);
    CHECK(procs[r]->Result<float>(0, 1, 0) == std::vector<float>{3.0f});
  }
  REQUIRE(device.open_mappings() > 0);

  clients[0]->Unregister(41);
  Reply first = clients[0]->Expect(wire::MsgType::kGpuUnregistered);
  CHECK(first.request_id == 41);
  clients[1]->Unregister(42);
  Reply last = clients[1]->Expect(wire::MsgType::kGpuUnregistered);
  CHECK(last.request_id == 42);
  // The last registration of this pid is gone: its mappings were closed before the answer.
  CHECK(device.open_mappings() == 0);
  clients.clear();
  daemon.Shutdown();
}

TEST_CASE_METHOD(OneDaemon, "GPU_UNREGISTER from a process that never registered: answered") {
  WireClient client(sock, "hostonly", 0, 1);
  client.Expect(wire::MsgType::kWelcome);
  client.Unregister(5);
  Reply answer = client.Expect(wire::MsgType::kGpuUnregistered);
  CHECK(answer.request_id == 5);
  daemon.Shutdown();
}

}  // namespace
}  // namespace ard
