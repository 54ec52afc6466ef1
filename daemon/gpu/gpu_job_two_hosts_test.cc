// GpuJob across two hosts of the host test double: every collective with one communicator
// spanning the hosts (communicator ranks known or not) and hierarchical (per-host communicator,
// exchange between hosts), and failures: a failed rank's asynchronous error, an abort from the
// control loop.
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "catch2/catch.hpp"
#include "daemon/gpu/gpu_job.h"
#include "daemon/gpu/gpu_job_fixtures.h"
#include "daemon/gpu/testing/fake_process.h"

namespace ard::gpu {
namespace {

using testing::Tensor;
using testing::TwoHosts;
using wire::DataType;
using wire::ReduceOp;

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

}  // namespace
}  // namespace ard::gpu
