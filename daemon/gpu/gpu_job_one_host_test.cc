// GpuJob and IpcCache on one host of the host test double: handle caching, event ordering,
// fusion offsets and group calls, every collective with shared and own GPUs, dtypes that need care
// (float16, bool), and bad input refused to that process only.
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "catch2/catch.hpp"
#include "daemon/collectives/half_float.h"
#include "daemon/gpu/gpu_job.h"
#include "daemon/gpu/gpu_job_fixtures.h"
#include "daemon/gpu/ipc_cache.h"
#include "daemon/gpu/testing/fake_process.h"
#include "daemon/gpu/testing/host_device.h"

namespace ard::gpu {
namespace {

using testing::FakeProcess;
using testing::HostDevice;
using testing::HostWorld;
using testing::OneHost;
using testing::Tensor;
using wire::DataType;
using wire::ReduceOp;

TEST_CASE("IpcCache opens each (pid, device, handle) once and closes it when the process leaves") {
  HostWorld world;
  HostDevice daemon(world, "h", 1, 1);
  FakeProcess p(world, "h", 100, 1, 0, 0);
  IpcCache cache(daemon);
  GpuRegistration reg = p.Registration();
  auto a = cache.OpenMemory(100, 0, reg.arena);
  auto b = cache.OpenMemory(100, 0, reg.arena);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(a->get() == b->get());
  CHECK(daemon.memory_opens() == 1);
  REQUIRE(cache.OpenEvent(100, 0, reg.events[0]).ok());
  CHECK(cache.entries() == 2);

  // Another process presenting the same handle does not own that memory.
  auto foreign = cache.OpenMemory(200, 0, reg.arena);
  CHECK(foreign.status().code() == absl::StatusCode::kPermissionDenied);

  a->reset();
  b->reset();
  CHECK(daemon.open_mappings() == 1);  // the cache still holds it
  cache.ReleaseProcess(100);
  CHECK(cache.entries() == 0);
  CHECK(daemon.open_mappings() == 0);
  CHECK(cache.OpenMemory(200, 0, reg.arena).ok());  // free to register once released
}

TEST_CASE("one host, two GPUs, three processes: fused allreduce with several runs") {
  HostWorld world;
  HostDevice daemon(world, "h", 1, 2);
  IpcCache cache(daemon);
  GpuJobOptions options;
  options.world_ranks = 3;
  options.comm_size = 2;
  options.local_comm_ranks = {{0, 0}, {1, 1}};
  options.initial_fusion_bytes = 64;  // forces growth
  GpuJob job(daemon, cache, options);
  FakeProcess p0(world, "h", 100, 2, 0, 0), p1(world, "h", 101, 2, 1, 1),
      p2(world, "h", 102, 2, 0, 2);  // p0 and p2 share GPU 0
  for (FakeProcess* p : {&p0, &p1, &p2}) REQUIRE(job.RegisterRank(p->Registration()).ok());
  REQUIRE(job.Init(*daemon.NewUniqueId()).ok());

  // Tensor A: float sum, tensor B: float average, tensor C: int32 max, at different arena offsets.
  std::vector<FakeProcess*> procs = {&p0, &p1, &p2};
  for (int r = 0; r < 3; ++r) {
    procs[r]->Submit<float>(0, {1.0f * (r + 1), 10.0f * (r + 1)}, 0);
    procs[r]->Submit<float>(1024, {3.0f * r, 6.0f}, 1);
    procs[r]->Submit<int32_t>(4096 + 8 * r, {r * 7 - 5}, 1);
  }
  std::vector<GpuTensorInput> a, b, c;
  for (int r = 0; r < 3; ++r) {
    a.push_back({r, 0, 0});
    b.push_back({r, 1024, 1});
    c.push_back({r, static_cast<uint64_t>(4096 + 8 * r), 1});
  }
  int groups_before = daemon.group_ends();
  REQUIRE(job.Allreduce({Tensor(DataType::kFloat32, ReduceOp::kSum, 2, a),
                         Tensor(DataType::kFloat32, ReduceOp::kAverage, 2, b),
                         Tensor(DataType::kInt32, ReduceOp::kMax, 1, c)})
              .ok());
  CHECK(daemon.group_ends() == groups_before + 1);  // both GPUs' calls in one group
  CHECK(job.fusion_bytes() >= 256 + 4);
  for (int r = 0; r < 3; ++r) {
    CHECK(procs[r]->Result<float>(0, 2, 0) == std::vector<float>{6.0f, 60.0f});
    CHECK(procs[r]->Result<float>(1024, 2, 1) == std::vector<float>{3.0f, 6.0f});
    CHECK(procs[r]->Result<int32_t>(4096 + 8 * r, 1, 1) == std::vector<int32_t>{9});
  }
  CHECK(job.CheckHealth().ok());
}

TEST_CASE("the daemon's work waits for the process's event, the process's read for the daemon's") {
  HostWorld world;
  HostDevice daemon(world, "h", 1, 1);
  IpcCache cache(daemon);
  GpuJobOptions options;
  options.local_comm_ranks = {{0, 0}};
  GpuJob job(daemon, cache, options);
  FakeProcess p(world, "h", 100, 1, 0, 0);
  REQUIRE(job.RegisterRank(p.Registration()).ok());
  REQUIRE(job.Init(*daemon.NewUniqueId()).ok());

  // The framework's stream is busy (gated) before it copies the input in: the daemon's stream
  // waits for the process's event, and Allreduce returns once the reduction is done.
  std::promise<void> gate;
  std::shared_future<void> gated = gate.get_future().share();
  static_cast<void>(p.device().Issue(
      p.stream(),
      [gated] {
        gated.wait();
        return absl::OkStatus();
      },
      false));
  p.Submit<float>(0, {2.5f, -1.0f}, 2);
  auto running = std::async(std::launch::async, [&] {
    return job.Allreduce({Tensor(DataType::kFloat32, ReduceOp::kSum, 2, {{0, 0, 2}})});
  });
  gate.set_value();
  REQUIRE(running.get().ok());
  CHECK(p.Result<float>(0, 2, 2) == std::vector<float>{2.5f, -1.0f});
}

// Item 5 of the review: COMPLETE (sent when Allreduce returns OK) must never report a result that
// is not in the process's arena yet. Before the fix Allreduce returned once the work was enqueued.
TEST_CASE("a collective returns OK only once its result is in every process's arena") {
  OneHost h(2, false);
  h.procs[0]->Stall();  // process 0's input is late (its stream is busy)
  for (int r = 0; r < 2; ++r) h.procs[r]->Submit<float>(0, {1.0f + r}, 0);
  std::thread late([&] {  // not synchronisation: only makes the input late
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    h.procs[0]->Resume();
  });
  REQUIRE(h.job->Allreduce({Tensor(DataType::kFloat32, ReduceOp::kSum, 1, h.Inputs(0, 0))}).ok());
  for (auto& p : h.procs) {  // read the arena directly, without waiting for the event
    float value = 0;
    std::memcpy(&value, p->arena_data(), sizeof(value));
    CHECK(value == 3.0f);
  }
  late.join();
}

// Item 3, the recorder that never records: a process whose stream is stuck fails the job at the
// deadline (naming the host) instead of holding the executor forever.
TEST_CASE("a process whose stream never records its event fails the job at the deadline") {
  OneHost h(2, false, absl::Milliseconds(200));
  h.procs[1]->Stall();
  for (int r = 0; r < 2; ++r) h.procs[r]->Submit<float>(0, {1.0f}, 0);
  absl::Status status =
      h.job->Allreduce({Tensor(DataType::kFloat32, ReduceOp::kSum, 1, h.Inputs(0, 0))});
  CHECK(status.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(std::string(status.message()).find("on host h") != std::string::npos);
  CHECK(h.job->CheckHealth().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(h.world.live_communicators() == 0);  // aborted by the thread that drives them
  CHECK(h.world.thread_violations() == 0);
  h.procs[1]->Resume();
}

// Item 7: integer average with several processes per GPU is refused per tensor (NCCL's PreMulSum
// is float-only); a communicator's refusal of a checked call (ncclInvalidUsage) fails the job.
TEST_CASE("integer average over shared GPUs is refused per tensor; an NCCL refusal fails the job") {
  OneHost h(3, true);  // ranks 0 and 2 share GPU 0
  for (int r = 0; r < 3; ++r) h.procs[r]->Submit<int32_t>(0, {3 * r}, 0);
  absl::Status refused =
      h.job->Allreduce({Tensor(DataType::kInt32, ReduceOp::kAverage, 1, h.Inputs(0, 0))});
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK(h.job->CheckReduction(DataType::kInt32, ReduceOp::kAverage).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(h.job->CheckReduction(DataType::kFloat32, ReduceOp::kAverage).ok());
  CHECK(h.job->CheckHealth().ok());  // that tensor's error only
  REQUIRE(h.job->Allreduce({Tensor(DataType::kInt32, ReduceOp::kSum, 1, h.Inputs(0, 0))}).ok());
  for (auto& p : h.procs) CHECK(p->Result<int32_t>(0, 1, 0) == std::vector<int32_t>{9});

  h.daemon.FailNextCall(absl::InvalidArgumentError("ncclInvalidUsage"));
  absl::Status failed =
      h.job->Allreduce({Tensor(DataType::kInt32, ReduceOp::kSum, 1, h.Inputs(0, 0))});
  CHECK(failed.code() == absl::StatusCode::kInternal);  // not one tensor's bad input
  CHECK_FALSE(h.job->CheckHealth().ok());
}

// Item 8: the fusion buffer grows geometrically; a job does not allocate (cudaMalloc/cudaFree,
// which synchronize the device) whenever a fused response is a little larger than the last.
TEST_CASE("fusion buffers grow geometrically, not on every larger response") {
  OneHost h(2, false);  // initial fusion buffer: 64 bytes per GPU
  const int before = h.daemon.allocations();
  for (size_t count = 20; count <= 200; count += 10) {  // two tensors: fused
    std::vector<float> values(count, 1.0f);
    for (auto& p : h.procs) {
      p->Submit<float>(0, values, 0);
      p->Submit<float>(1024, values, 1);
    }
    REQUIRE(h.job
                ->Allreduce({Tensor(DataType::kFloat32, ReduceOp::kSum, count, h.Inputs(0, 0)),
                             Tensor(DataType::kFloat32, ReduceOp::kSum, count, h.Inputs(1024, 1))})
                .ok());
  }
  // 160 -> 1600 bytes: 64 doubles to 2048 in 4 steps per GPU (two GPUs), not 19 steps.
  CHECK(h.daemon.allocations() - before == 8);
}

// Item 6, the daemon's part: a process that frees its staging memory while the daemon still maps
// it makes the daemon's next copy an illegal address, a sticky error: the job fails saying so.
TEST_CASE("a process freeing its arena under the daemon fails the job with the sticky error") {
  OneHost h(2, false);
  for (int r = 0; r < 2; ++r) h.procs[r]->Submit<float>(0, {1.0f}, 0);
  REQUIRE(h.job->Allreduce({Tensor(DataType::kFloat32, ReduceOp::kSum, 1, h.Inputs(0, 0))}).ok());
  h.procs[1]->FreeArena();
  absl::Status status =
      h.job->Allreduce({Tensor(DataType::kFloat32, ReduceOp::kSum, 1, h.Inputs(0, 0))});
  CHECK(IsStickyError(status));
  CHECK(std::string(status.message()).find("illegal memory access") != std::string::npos);
}

TEST_CASE("one host: broadcast, allgather, reducescatter and pre/postscale, shared and own GPUs") {
  for (bool share : {true, false}) {
    CAPTURE(share);
    OneHost h(3, share);
    const int n = 3;
    // Broadcast of an int16 tensor (not reducible: moved byte for byte) from rank 2.
    for (int r = 0; r < n; ++r) h.procs[r]->Submit<int16_t>(0, {int16_t(r), int16_t(-r - 7)}, 0);
    GpuTensor b = Tensor(DataType::kInt16, ReduceOp::kSum, 2, h.Inputs(0, 0));
    REQUIRE(h.job->Broadcast(b, 2).ok());
    for (auto& p : h.procs) CHECK(p->Result<int16_t>(0, 2, 0) == std::vector<int16_t>{2, -9});
    // Allgather of 2 doubles per rank: 6 doubles in rank order, in place at each input.
    for (int r = 0; r < n; ++r) h.procs[r]->Submit<double>(512, {r + 0.5, -1.0 * r}, 1);
    REQUIRE(h.job->Allgather(Tensor(DataType::kFloat64, ReduceOp::kSum, 2, h.Inputs(512, 1))).ok());
    for (auto& p : h.procs) {
      CHECK(p->Result<double>(512, 6, 1) == std::vector<double>{0.5, 0, 1.5, -1, 2.5, -2});
    }
    // Reducescatter of 5 rows of 2 int32 over 3 ranks: blocks of 2, 2 and 1 rows; max.
    for (int r = 0; r < n; ++r) {
      std::vector<int32_t> v;
      for (int i = 0; i < 10; ++i) v.push_back(i == r ? 100 : i * (r + 1));
      h.procs[r]->Submit<int32_t>(1024, v, 2);
    }
    REQUIRE(h.job
                ->Reducescatter(Tensor(DataType::kInt32, ReduceOp::kMax, 10, h.Inputs(1024, 2)),
                                {4, 4, 2})
                .ok());
    CHECK(h.procs[0]->Result<int32_t>(1024, 4, 2) == std::vector<int32_t>{100, 100, 100, 9});
    CHECK(h.procs[1]->Result<int32_t>(1024, 4, 2) == std::vector<int32_t>{12, 15, 18, 21});
    CHECK(h.procs[2]->Result<int32_t>(1024, 2, 2) == std::vector<int32_t>{24, 27});
    // Allreduce with prescale 0.5 and postscale 3 next to an unscaled tensor in the same fusion.
    for (int r = 0; r < n; ++r) {
      h.procs[r]->Submit<float>(2048, {1.0f + r, 2.0f}, 3);
      h.procs[r]->Submit<float>(4096, {1.0f + r}, 3);
    }
    GpuTensor scaled = Tensor(DataType::kFloat32, ReduceOp::kSum, 2, h.Inputs(2048, 3));
    scaled.prescale = 0.5;
    scaled.postscale = 3;
    REQUIRE(
        h.job->Allreduce({scaled, Tensor(DataType::kFloat32, ReduceOp::kSum, 1, h.Inputs(4096, 3))})
            .ok());
    for (auto& p : h.procs) {
      CHECK(p->Result<float>(2048, 2, 3) == std::vector<float>{9.0f, 9.0f});
      CHECK(p->Result<float>(4096, 1, 3) == std::vector<float>{6.0f});
    }
    // Broadcast is native on every GPU (the root's communicator rank is known); allgather only
    // with one process per GPU (else a byte sum); uneven reducescatter is an allreduce.
    CHECK(h.daemon.collective_calls("broadcast") == (share ? 2 : n));
    CHECK(h.daemon.collective_calls("allgather") == (share ? 0 : n));
    CHECK(h.daemon.collective_calls("reducescatter") == 0);  // uneven blocks: allreduce
    // Item 8: scaling and the shared GPU's host reduction copy through page-locked memory.
    CHECK(h.daemon.pageable_copies() == 0);
    CHECK(h.job->CheckHealth().ok());
  }
}

// Item 8: a response of one unscaled tensor, one process per GPU, is reduced in place in the
// staging ranges: no copy into the fusion buffer and back. A fused or scaled response still is.
TEST_CASE("one tensor, one process per GPU: reduced in place, no device-to-device copy") {
  OneHost h(2, false);
  for (int r = 0; r < 2; ++r) h.procs[r]->Submit<float>(0, {1.0f + r, -2.0f * r, 0.5f}, 0);
  const int before = h.daemon.device_copies();
  REQUIRE(
      h.job->Allreduce({Tensor(DataType::kFloat32, ReduceOp::kAverage, 3, h.Inputs(0, 0))}).ok());
  CHECK(h.daemon.device_copies() - before == 0);
  for (auto& p : h.procs) CHECK(p->Result<float>(0, 3, 0) == std::vector<float>{1.5f, -1.0f, 0.5f});
  // Two tensors: into the fusion buffer and back, one copy each way per tensor and rank.
  for (int r = 0; r < 2; ++r) {
    h.procs[r]->Submit<int32_t>(0, {r + 1}, 0);
    h.procs[r]->Submit<int32_t>(256, {10 * r}, 1);
  }
  const int fused = h.daemon.device_copies();
  REQUIRE(h.job
              ->Allreduce({Tensor(DataType::kInt32, ReduceOp::kSum, 1, h.Inputs(0, 0)),
                           Tensor(DataType::kInt32, ReduceOp::kSum, 1, h.Inputs(256, 1))})
              .ok());
  CHECK(h.daemon.device_copies() - fused == 8);
  for (auto& p : h.procs) {
    CHECK(p->Result<int32_t>(0, 1, 0) == std::vector<int32_t>{3});
    CHECK(p->Result<int32_t>(256, 1, 1) == std::vector<int32_t>{10});
  }
  CHECK(h.job->CheckHealth().ok());
}

TEST_CASE("one host, one process per GPU: even reducescatter is native, with pre/postscale") {
  OneHost h(2, false);
  for (int r = 0; r < 2; ++r) h.procs[r]->Submit<float>(0, {1.0f + r, 2, 3, 4.0f * r}, 0);
  GpuTensor t = Tensor(DataType::kFloat32, ReduceOp::kAverage, 4, h.Inputs(0, 0));
  t.prescale = 2;
  t.postscale = 10;
  REQUIRE(h.job->Reducescatter(t, {2, 2}).ok());
  CHECK(h.daemon.collective_calls("reducescatter") == 2);
  CHECK(h.procs[0]->Result<float>(0, 2, 0) == std::vector<float>{30, 40});
  CHECK(h.procs[1]->Result<float>(0, 2, 0) == std::vector<float>{60, 40});
}

TEST_CASE("float16 allreduce with pre/postscale and bool broadcast through the double") {
  OneHost h(3, true);
  using collectives::FloatToHalf;
  using collectives::HalfToFloat;
  for (int r = 0; r < 3; ++r) {
    h.procs[r]->Submit<uint16_t>(0, {FloatToHalf(1.5f * (r + 1)), FloatToHalf(-2.0f)}, 0);
    h.procs[r]->Submit<uint8_t>(256, {uint8_t(r == 1), 1, 0}, 1);
  }
  GpuTensor t = Tensor(DataType::kFloat16, ReduceOp::kAverage, 2, h.Inputs(0, 0));
  t.prescale = 4;
  t.postscale = 0.5;
  REQUIRE(h.job->Allreduce({t}).ok());
  REQUIRE(h.job->Broadcast(Tensor(DataType::kBool, ReduceOp::kSum, 3, h.Inputs(256, 1)), 1).ok());
  for (auto& p : h.procs) {
    std::vector<uint16_t> out = p->Result<uint16_t>(0, 2, 0);
    CHECK(HalfToFloat(out[0]) == 6.0f);  // (1.5 + 3 + 4.5) * 4 / 3 * 0.5
    CHECK(HalfToFloat(out[1]) == -4.0f);
    CHECK(p->Result<uint8_t>(256, 3, 1) == std::vector<uint8_t>{1, 1, 0});
  }
}

TEST_CASE("bad broadcast root and unchecked ranges are refused without touching the GPU") {
  OneHost h(2, false);
  const int before = h.daemon.group_ends();
  GpuTensor t = Tensor(DataType::kFloat32, ReduceOp::kSum, 1, h.Inputs(0, 0));
  CHECK(h.job->Broadcast(t, 2).code() == absl::StatusCode::kInvalidArgument);
  CHECK(h.job->Broadcast(t, -1).code() == absl::StatusCode::kInvalidArgument);
  CHECK(h.job->CheckHealth().ok());  // nothing aborted: refused before any GPU work
  // An allgather result that would not fit the arena (64 KiB) past the input: the submit check
  // should have refused it, so the job fails (a broken invariant), still before any GPU work.
  GpuTensor big = Tensor(DataType::kFloat32, ReduceOp::kSum, 1, h.Inputs((1 << 16) - 4, 0));
  CHECK(h.job->Allgather(big).code() == absl::StatusCode::kInternal);
  CHECK(h.daemon.group_ends() == before);
}

TEST_CASE("bad input is refused to that process only") {
  HostWorld world;
  HostDevice daemon(world, "h", 1, 2);
  IpcCache cache(daemon);
  GpuJobOptions options;
  options.world_ranks = 2;
  options.comm_size = 1;
  options.local_comm_ranks = {{0, 0}};
  GpuJob job(daemon, cache, options);
  FakeProcess good(world, "h", 100, 2, 0, 0), other(world, "h", 101, 2, 0, 1);

  SECTION("wrong device id") {
    GpuRegistration reg = other.Registration();
    reg.device = 1;  // the job has no rank on GPU 1 here
    absl::Status s = job.RegisterRank(reg);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(s.message()).find("not one of this job's GPUs") != std::string::npos);
  }
  SECTION("memory the process does not own") {
    REQUIRE(job.RegisterRank(good.Registration()).ok());
    GpuRegistration reg = other.Registration();
    reg.arena = good.Registration().arena;
    CHECK(job.RegisterRank(reg).code() == absl::StatusCode::kPermissionDenied);
  }
  SECTION("stale handle") {
    GpuRegistration reg = other.Registration();
    other.FreeArena();
    absl::Status s = job.RegisterRank(reg);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(s.message()).find("stale") != std::string::npos);
  }
  SECTION("event index and arena bounds") {
    REQUIRE(job.RegisterRank(other.Registration()).ok());
    CHECK(job.CheckInput(1, 0, 8, 4).code() == absl::StatusCode::kInvalidArgument);
    CHECK(job.CheckInput(1, (1 << 16) - 4, 8, 0).code() == absl::StatusCode::kInvalidArgument);
    CHECK(job.CheckInput(1, 0, 8, 3).ok());
    CHECK(job.CheckInput(7, 0, 8, 0).code() == absl::StatusCode::kFailedPrecondition);
    job.UnregisterRank(1);  // the misbehaving process leaves
    cache.ReleaseProcess(101);
  }
  // Whatever the bad process did, the good one registers and runs.
  if (job.CheckInput(0, 0, 4, 0).code() == absl::StatusCode::kFailedPrecondition) {
    REQUIRE(job.RegisterRank(good.Registration()).ok());
  }
  REQUIRE(job.Init(*daemon.NewUniqueId()).ok());
  good.Submit<float>(0, {4}, 0);
  REQUIRE(job.Allreduce({Tensor(DataType::kFloat32, ReduceOp::kSum, 1, {{0, 0, 0}})}).ok());
  CHECK(good.Result<float>(0, 1, 0) == std::vector<float>{4});
}

}  // namespace
}  // namespace ard::gpu
