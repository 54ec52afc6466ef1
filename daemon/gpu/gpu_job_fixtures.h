// TEST HELPER: GpuJobs on the host test double for the gpu_job_*_test files: one host with
// several processes (OneHost), two hosts in one simulated cluster (TwoHosts), and a tensor
// builder. Tests only; each fixture is used from the test's thread, which drives host a's GpuJob
// (its executor); host b's GpuJob is driven by its own Driver thread, as in the daemon, so the
// double's one-driving-thread rule holds.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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

// One thread that runs what it is given in order: a job's executor thread.
class Driver {
 public:
  Driver() : thread_([this] { Loop(); }) {}
  ~Driver() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  std::future<absl::Status> Run(std::function<absl::Status()> fn) {
    auto task = std::make_shared<std::packaged_task<absl::Status()>>(std::move(fn));
    std::future<absl::Status> done = task->get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back([task] { (*task)(); });
    }
    cv_.notify_all();
    return done;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::function<void()> fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

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
  std::vector<std::unique_ptr<FakeProcess>> procs;  // rank r on host r / 2, GPU r % 2
  std::unique_ptr<GpuJob> ja, jb;
  Driver b_executor;  // host b's executor thread (declared last: joined first)
  UniqueId id{}, idb{};

  // `init`: Init both jobs (else the test calls InitA/InitB itself).
  TwoHosts(GpuMode mode, TwoHostExchange* exchange, bool known_comm_ranks = false, bool init = true,
           absl::Duration op_timeout = absl::Seconds(30)) {
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
    oa.op_timeout = ob.op_timeout = op_timeout;
    oa.host_name = "a";
    ob.host_name = "b";
    ja = std::make_unique<GpuJob>(da, ca, oa);
    jb = std::make_unique<GpuJob>(db, cb, ob);
    for (int r = 0; r < 4; ++r) {
      procs.push_back(
          std::make_unique<FakeProcess>(world, r < 2 ? "a" : "b", 100 + r, 2, r % 2, r));
      REQUIRE((r < 2 ? ja : jb)->RegisterRank(procs[r]->Registration()).ok());
    }
    id = *da.NewUniqueId();
    idb = mode == GpuMode::kNccl ? id : *db.NewUniqueId();
    if (!init) return;
    auto fb = InitB();
    REQUIRE(ja->Init(id).ok());
    REQUIRE(fb.get().ok());
  }
  std::future<absl::Status> InitB() {
    return b_executor.Run([this] { return jb->Init(idb); });
  }
  ~TwoHosts() {
    b_executor
        .Run([this] {  // each executor ends its own job's communicators
          jb->Close();
          return absl::OkStatus();
        })
        .wait();
    ja->Close();
  }

  // Every rank submits {r + 1, 2 * (r + 1)} and both hosts run the allreduce.
  void RunAllreduce(wire::ReduceOp op) {
    for (int r = 0; r < 4; ++r) procs[r]->Submit<float>(64, {1.0f + r, 2.0f + 2 * r}, 3);
    auto run = [&](GpuJob& job, int first) {
      return job.Allreduce(
          {Tensor(wire::DataType::kFloat32, op, 2, {{first, 64, 3}, {first + 1, 64, 3}})});
    };
    auto fb = b_executor.Run([&] { return run(*jb, 2); });
    REQUIRE(run(*ja, 0).ok());
    REQUIRE(fb.get().ok());
  }

  // Runs `op(job, first local rank)` on both hosts at once.
  void Both(const std::function<absl::Status(GpuJob&, int)>& op) {
    auto fb = b_executor.Run([&] { return op(*jb, 2); });
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

  OneHost(int ranks, bool share, absl::Duration op_timeout = absl::Seconds(30)) {
    GpuJobOptions options;
    options.op_timeout = op_timeout;
    options.host_name = "h";
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
  ~OneHost() { job->Close(); }  // this thread drives the job: it ends the communicators
  std::vector<GpuTensorInput> Inputs(uint64_t offset, uint32_t event) {
    std::vector<GpuTensorInput> in;
    for (int r = 0; r < static_cast<int>(procs.size()); ++r) in.push_back({r, offset, event});
    return in;
  }
};

}  // namespace ard::gpu::testing
