// GpuJob and IpcCache on the host test double: handle caching, event ordering, fusion offsets,
// group calls, hierarchical mode, abort on a failed rank, and bad input.
#include "daemon/gpu/gpu_job.h"

#include <functional>
#include <future>
#include <thread>

#include "catch2/catch.hpp"
#include "daemon/collectives/half_float.h"
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

  TwoHosts(GpuMode mode, testing::TwoHostExchange* exchange, bool known_comm_ranks = false) {
    GpuJobOptions oa, ob;
    oa.mode = ob.mode = mode;
    oa.world_ranks = ob.world_ranks = 4;
    if (mode == GpuMode::kNccl) {
      if (known_comm_ranks) oa.comm_rank_of = ob.comm_rank_of = {0, 1, 2, 3};
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

  // Runs `op(job, first local rank)` on both hosts at once.
  void Both(const std::function<absl::Status(GpuJob&, int)>& op) {
    auto fb = std::async(std::launch::async, [&] { return op(*jb, 2); });
    absl::Status a = op(*ja, 0);
    absl::Status b = fb.get();
    REQUIRE(a.ok());
    REQUIRE(b.ok());
  }
  static std::vector<GpuTensorInput> Local(int first, uint64_t offset, uint32_t event) {
    return {{first, offset, event}, {first + 1, offset, event}};
  }
  int Calls(const std::string& kind) {
    return da.collective_calls(kind) + db.collective_calls(kind);
  }
};

TEST_CASE("two hosts: broadcast, allgather, reducescatter, scaled allreduce in every mode") {
  struct Mode {
    const char* name;
    GpuMode mode;
    bool known;
  };
  for (Mode m : {Mode{"nccl, communicator ranks unknown", GpuMode::kNccl, false},
                 Mode{"nccl, communicator ranks known", GpuMode::kNccl, true},
                 Mode{"hierarchical", GpuMode::kHierarchical, false}}) {
    CAPTURE(m.name);
    testing::TwoHostExchange exchange;
    TwoHosts hosts(m.mode, &exchange, m.known);
    auto& procs = hosts.procs;
    // Broadcast from rank 3 (host b) of 3 int64.
    for (int r = 0; r < 4; ++r) procs[r]->Submit<int64_t>(0, {r * 10, -r, int64_t(1) << 40}, 0);
    hosts.Both([](GpuJob& job, int first) {
      return job.Broadcast(
          Tensor(DataType::kInt64, ReduceOp::kSum, 3, TwoHosts::Local(first, 0, 0)), 3);
    });
    for (auto& p : procs) {
      CHECK(p->Result<int64_t>(0, 3, 0) == std::vector<int64_t>{30, -3, int64_t(1) << 40});
    }
    // Allgather of one float per rank.
    for (int r = 0; r < 4; ++r) procs[r]->Submit<float>(256, {r * 1.5f}, 1);
    hosts.Both([](GpuJob& job, int first) {
      return job.Allgather(
          Tensor(DataType::kFloat32, ReduceOp::kSum, 1, TwoHosts::Local(first, 256, 1)));
    });
    for (auto& p : procs)
      CHECK(p->Result<float>(256, 4, 1) == std::vector<float>{0, 1.5f, 3, 4.5f});
    // Reducescatter, even (4 rows of 1) then uneven (6 rows of 1: 2, 2, 1, 1), sum.
    for (size_t rows : {4, 6}) {
      CAPTURE(rows);
      std::vector<size_t> blocks =
          rows == 4 ? std::vector<size_t>{1, 1, 1, 1} : std::vector<size_t>{2, 2, 1, 1};
      for (int r = 0; r < 4; ++r) {
        std::vector<int32_t> v;
        for (size_t i = 0; i < rows; ++i) v.push_back(static_cast<int32_t>(i * 100 + r));
        procs[r]->Submit<int32_t>(512, v, 2);
      }
      hosts.Both([&](GpuJob& job, int first) {
        return job.Reducescatter(
            Tensor(DataType::kInt32, ReduceOp::kSum, rows, TwoHosts::Local(first, 512, 2)), blocks);
      });
      size_t start = 0;
      for (int r = 0; r < 4; ++r) {
        std::vector<int32_t> want;
        for (size_t i = start; i < start + blocks[r]; ++i) want.push_back(int32_t(i * 400 + 6));
        CHECK(procs[r]->Result<int32_t>(512, blocks[r], 2) == want);
        start += blocks[r];
      }
    }
    // Allreduce with prescale and postscale (average: (1 + 2 + 3 + 4) / 4 * 2 * 0.25).
    for (int r = 0; r < 4; ++r) procs[r]->Submit<double>(1024, {1.0 + r}, 3);
    hosts.Both([](GpuJob& job, int first) {
      GpuTensor t =
          Tensor(DataType::kFloat64, ReduceOp::kAverage, 1, TwoHosts::Local(first, 1024, 3));
      t.prescale = 2;
      t.postscale = 0.25;
      return job.Allreduce({t});
    });
    for (auto& p : procs) CHECK(p->Result<double>(1024, 1, 3) == std::vector<double>{1.25});
    const bool native = m.known;
    // Hierarchical: no native call crosses hosts; each of its 3 reducing collectives broadcasts
    // the host's result back to both GPUs of both hosts.
    CHECK(hosts.Calls("broadcast") == (native ? 4 : m.mode == GpuMode::kHierarchical ? 12 : 0));
    CHECK(hosts.Calls("allgather") == (native ? 4 : 0));
    CHECK(hosts.Calls("reducescatter") == (native ? 4 : 0));             // the even one only
    if (m.mode == GpuMode::kHierarchical) CHECK(exchange.calls() == 5);  // one per collective
    CHECK(hosts.ja->CheckHealth().ok());
    CHECK(hosts.jb->CheckHealth().ok());
  }
}

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

// Several processes on one host; `share` puts ranks 0 and 2 on GPU 0 (not one rank per GPU).
struct OneHost {
  HostWorld world;
  HostDevice daemon{world, "h", 1, 3};
  IpcCache cache{daemon};
  std::unique_ptr<GpuJob> job;
  std::vector<std::unique_ptr<FakeProcess>> procs;

  OneHost(int ranks, bool share) {
    GpuJobOptions options;
    options.world_ranks = ranks;
    const int gpus = share ? ranks - 1 : ranks;
    options.comm_size = gpus;
    for (int g = 0; g < gpus; ++g) options.local_comm_ranks.push_back({g, g});
    options.initial_fusion_bytes = 64;
    job = std::make_unique<GpuJob>(daemon, cache, options);
    for (int r = 0; r < ranks; ++r) {
      const int gpu = share && r == ranks - 1 ? 0 : r;
      procs.push_back(std::make_unique<FakeProcess>(world, "h", 100 + r, 3, gpu, r));
      REQUIRE(job->RegisterRank(procs[r]->Registration()).ok());
    }
    REQUIRE(job->Init(*daemon.NewUniqueId()).ok());
  }
  std::vector<GpuTensorInput> Inputs(uint64_t offset, uint32_t event) {
    std::vector<GpuTensorInput> in;
    for (int r = 0; r < static_cast<int>(procs.size()); ++r) in.push_back({r, offset, event});
    return in;
  }
};

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
    CHECK(h.job->CheckHealth().ok());
  }
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
  // An allgather result that would not fit the arena (64 KiB) past the input.
  GpuTensor big = Tensor(DataType::kFloat32, ReduceOp::kSum, 1, h.Inputs((1 << 16) - 4, 0));
  CHECK(h.job->Allgather(big).code() == absl::StatusCode::kInternal);
  CHECK(h.daemon.group_ends() == before);
  CHECK(h.job->CheckHealth().ok());  // nothing aborted: refused before any GPU work
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
