// GpuJob and IpcCache on the host test double: handle caching, event ordering, fusion offsets,
// group calls, hierarchical mode, abort on a failed rank, and bad input.
#include "daemon/gpu/gpu_job.h"

#include <future>
#include <thread>

#include "catch2/catch.hpp"
#include "daemon/gpu/ipc_cache.h"
#include "daemon/gpu/testing/fake_process.h"
#include "daemon/gpu/testing/host_device.h"

namespace ard::gpu {
namespace {

using testing::FakeProcess;
using testing::HostDevice;
using testing::HostWorld;
using wire::DataType;
using wire::ReduceOp;

GpuTensor Tensor(DataType dtype, ReduceOp op, size_t count, std::vector<GpuTensorInput> inputs) {
  return GpuTensor{FusionTensor{dtype, op, count}, std::move(inputs)};
}

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

  // The framework's stream is busy (gated) before it copies the input in: Allreduce returns at
  // once (nothing waits on the host) and still reduces the late input.
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
  REQUIRE(job.Allreduce({Tensor(DataType::kFloat32, ReduceOp::kSum, 2, {{0, 0, 2}})}).ok());
  gate.set_value();
  CHECK(p.Result<float>(0, 2, 2) == std::vector<float>{2.5f, -1.0f});
}

struct TwoHosts {
  HostWorld world;
  HostDevice da{world, "a", 1, 2}, db{world, "b", 2, 2};
  IpcCache ca{da}, cb{db};
  std::unique_ptr<GpuJob> ja, jb;
  std::vector<std::unique_ptr<FakeProcess>> procs;  // rank r on host r / 2, GPU r % 2
  UniqueId id{};

  TwoHosts(GpuMode mode, testing::TwoHostExchange* exchange) {
    GpuJobOptions oa, ob;
    oa.mode = ob.mode = mode;
    oa.world_ranks = ob.world_ranks = 4;
    if (mode == GpuMode::kNccl) {
      oa.comm_size = ob.comm_size = 4;
      oa.local_comm_ranks = {{0, 0}, {1, 1}};
      ob.local_comm_ranks = {{2, 0}, {3, 1}};
    } else {
      oa.comm_size = ob.comm_size = 2;
      oa.local_comm_ranks = ob.local_comm_ranks = {{0, 0}, {1, 1}};
      oa.cross_host = exchange->For(0);
      ob.cross_host = exchange->For(1);
    }
    oa.init_timeout = ob.init_timeout = absl::Seconds(5);
    ja = std::make_unique<GpuJob>(da, ca, oa);
    jb = std::make_unique<GpuJob>(db, cb, ob);
    for (int r = 0; r < 4; ++r) {
      procs.push_back(
          std::make_unique<FakeProcess>(world, r < 2 ? "a" : "b", 100 + r, 2, r % 2, r));
      REQUIRE((r < 2 ? ja : jb)->RegisterRank(procs[r]->Registration()).ok());
    }
    UniqueId ida = *da.NewUniqueId(), idb = mode == GpuMode::kNccl ? ida : *db.NewUniqueId();
    auto fb = std::async(std::launch::async, [&] { return jb->Init(idb); });
    REQUIRE(ja->Init(ida).ok());
    REQUIRE(fb.get().ok());
    id = ida;
  }

  // Every rank submits {r + 1, 2 * (r + 1)} and both hosts run the allreduce.
  void RunAllreduce(ReduceOp op) {
    for (int r = 0; r < 4; ++r) procs[r]->Submit<float>(64, {1.0f + r, 2.0f + 2 * r}, 3);
    auto run = [&](GpuJob& job, int first) {
      return job.Allreduce(
          {Tensor(DataType::kFloat32, op, 2, {{first, 64, 3}, {first + 1, 64, 3}})});
    };
    auto fb = std::async(std::launch::async, [&] { return run(*jb, 2); });
    REQUIRE(run(*ja, 0).ok());
    REQUIRE(fb.get().ok());
  }
};

TEST_CASE("two hosts, one communicator spanning all four GPUs") {
  TwoHosts hosts(GpuMode::kNccl, nullptr);
  hosts.RunAllreduce(ReduceOp::kSum);
  for (auto& p : hosts.procs) CHECK(p->Result<float>(64, 2, 3) == std::vector<float>{10, 20});
  hosts.RunAllreduce(ReduceOp::kAverage);
  for (auto& p : hosts.procs) CHECK(p->Result<float>(64, 2, 3) == std::vector<float>{2.5f, 5});
}

TEST_CASE("hierarchical: reduce within the host, exchange between hosts, broadcast back") {
  testing::TwoHostExchange exchange;
  TwoHosts hosts(GpuMode::kHierarchical, &exchange);
  hosts.RunAllreduce(ReduceOp::kAverage);
  for (auto& p : hosts.procs) CHECK(p->Result<float>(64, 2, 3) == std::vector<float>{2.5f, 5});
  hosts.RunAllreduce(ReduceOp::kMax);
  for (auto& p : hosts.procs) CHECK(p->Result<float>(64, 2, 3) == std::vector<float>{4, 8});
  CHECK(exchange.calls() == 2);  // one host exchange per fused allreduce, not per GPU
}

TEST_CASE("a failed rank: the asynchronous error aborts the job; later work fails fast") {
  TwoHosts hosts(GpuMode::kNccl, nullptr);
  // Host b never issues its half: host a's collective stays pending on the GPU (Allreduce itself
  // returned: the host does not wait). Host b's process dies.
  for (int r = 0; r < 2; ++r) hosts.procs[r]->Submit<float>(64, {1, 1}, 3);
  REQUIRE(
      hosts.ja->Allreduce({Tensor(DataType::kFloat32, ReduceOp::kSum, 2, {{0, 64, 3}, {1, 64, 3}})})
          .ok());
  hosts.world.FailCommunicator(hosts.id, absl::UnavailableError("rank 2 exited"));
  absl::Status health = hosts.ja->CheckHealth();
  CHECK(health.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(health.message()).find("rank 2 exited") != std::string::npos);
  absl::Status later = hosts.ja->Allreduce(
      {Tensor(DataType::kFloat32, ReduceOp::kSum, 2, {{0, 64, 3}, {1, 64, 3}})});
  CHECK(later.code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("abort from the control loop unblocks a collective waiting for a silent peer") {
  TwoHosts hosts(GpuMode::kHierarchical, nullptr);  // no exchange: local communicator of 2 GPUs
  // Only GPU 0's rank gets work: GPU 1's rank is silent; the job is aborted (host went DOWN).
  hosts.ja->Abort(absl::UnavailableError("host b is DOWN"));
  absl::Status status = hosts.ja->Allreduce(
      {Tensor(DataType::kFloat32, ReduceOp::kSum, 2, {{0, 64, 3}, {1, 64, 3}})});
  CHECK(status.code() == absl::StatusCode::kUnavailable);
  CHECK(hosts.ja->CheckHealth().code() == absl::StatusCode::kUnavailable);
  // Host b's job is unaffected.
  CHECK(hosts.jb->CheckHealth().ok());
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
