// TEST HELPER: GpuJobs on the host test double for the gpu_job_*_test files: one host with
// several processes (OneHost), two hosts in one simulated cluster (TwoHosts), and a tensor
// builder. Tests only; each fixture is used from the test's thread (TwoHosts runs host b's half
// of a collective on a std::async thread).
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "catch2/catch.hpp"
#include "daemon/gpu/gpu_job.h"
#include "daemon/gpu/ipc_cache.h"
#include "daemon/gpu/testing/fake_process.h"
#include "daemon/gpu/testing/host_device.h"

namespace ard::gpu::testing {

inline GpuTensor Tensor(wire::DataType dtype, wire::ReduceOp op, size_t count,
                        std::vector<GpuTensorInput> inputs) {
  return GpuTensor{FusionTensor{dtype, op, count}, std::move(inputs)};
}

// Two hosts (a, b) of two GPUs each, one process per GPU (rank r on host r / 2, GPU r % 2), their
// GpuJobs initialised in `mode`; hierarchical mode exchanges between hosts through `exchange`.
struct TwoHosts {
  HostWorld world;
  HostDevice da{world, "a", 1, 2}, db{world, "b", 2, 2};
  IpcCache ca{da}, cb{db};
  std::unique_ptr<GpuJob> ja, jb;
  std::vector<std::unique_ptr<FakeProcess>> procs;  // rank r on host r / 2, GPU r % 2
  UniqueId id{};

  TwoHosts(GpuMode mode, TwoHostExchange* exchange, bool known_comm_ranks = false) {
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
  void RunAllreduce(wire::ReduceOp op) {
    for (int r = 0; r < 4; ++r) procs[r]->Submit<float>(64, {1.0f + r, 2.0f + 2 * r}, 3);
    auto run = [&](GpuJob& job, int first) {
      return job.Allreduce(
          {Tensor(wire::DataType::kFloat32, op, 2, {{first, 64, 3}, {first + 1, 64, 3}})});
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

}  // namespace ard::gpu::testing
