// GpuJob across two hosts of the host test double: every collective with one communicator
// spanning the hosts (communicator ranks known or not) and hierarchical (per-host communicator,
// exchange between hosts), and failures: a failed rank's asynchronous error, an abort from the
// control loop (on the driving thread only), a silent peer's deadline, and the normal end.
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
    // Item 8: the host-staged steps copy through page-locked memory, never pageable.
    CHECK(hosts.da.pageable_copies() == 0);
    CHECK(hosts.db.pageable_copies() == 0);
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

std::vector<GpuTensor> HostATensor() {
  return {Tensor(DataType::kFloat32, ReduceOp::kSum, 2, {{0, 64, 3}, {1, 64, 3}})};
}

TEST_CASE("a failed rank: the asynchronous error aborts the job; later work fails fast") {
  TwoHosts hosts(GpuMode::kNccl, nullptr);
  // Host b never issues its half: host a's allreduce waits on the GPU until host b's process dies
  // (its communicator reports the error), whichever comes first.
  for (int r = 0; r < 2; ++r) hosts.procs[r]->Submit<float>(64, {1, 1}, 3);
  testing::Driver a_executor;
  auto running = a_executor.Run([&] { return hosts.ja->Allreduce(HostATensor()); });
  hosts.world.FailCommunicator(hosts.id, absl::UnavailableError("rank 2 exited"));
  absl::Status failed = running.get();
  CHECK(failed.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(failed.message()).find("rank 2 exited") != std::string::npos);
  absl::Status later = a_executor.Run([&] { return hosts.ja->Allreduce(HostATensor()); }).get();
  CHECK(later.code() == absl::StatusCode::kUnavailable);
}

// Item 1 of the review: ncclCommAbort frees the communicator, so only its driving thread may call
// it. Before the fix GpuJob::Abort aborted the communicators from the calling thread.
TEST_CASE(
    "abort from the control loop stops a collective waiting for a silent peer, on its thread") {
  TwoHosts hosts(GpuMode::kNccl, nullptr, false, /*init=*/false);
  testing::Driver a_executor;  // host a's executor: it drives host a's communicators
  auto fb = hosts.InitB();
  REQUIRE(a_executor.Run([&] { return hosts.ja->Init(hosts.id); }).get().ok());
  REQUIRE(fb.get().ok());
  for (int r = 0; r < 2; ++r) hosts.procs[r]->Submit<float>(64, {1, 1}, 3);
  auto running = a_executor.Run([&] { return hosts.ja->Allreduce(HostATensor()); });
  hosts.ja->Abort(absl::UnavailableError("host b is DOWN"));  // the control loop's thread
  absl::Status status = running.get();
  CHECK(status.code() == absl::StatusCode::kUnavailable);
  CHECK(std::string(status.message()) == "host b is DOWN");
  CHECK(hosts.world.thread_violations() == 0);
  CHECK(hosts.world.aborted_communicators() == 2);  // host a's two, by its executor
  CHECK(hosts.ja->CheckHealth().code() == absl::StatusCode::kUnavailable);
  a_executor
      .Run([&] {
        hosts.ja->Close();
        return absl::OkStatus();
      })
      .wait();
}

// Item 2: the control loop's calls never wait for the executor's init or collectives.
TEST_CASE("registration and input checks answer while the executor waits in communicator init") {
  TwoHosts hosts(GpuMode::kNccl, nullptr, false, /*init=*/false);
  testing::Driver a_executor;
  auto init_a = a_executor.Run([&] { return hosts.ja->Init(hosts.id); });
  // Host b has not started its init: host a's waits for it. The control loop is not blocked.
  CHECK(hosts.ja->CheckInput(0, 0, 8, 0).ok());
  hosts.ja->UnregisterRank(1);
  REQUIRE(hosts.ja->RegisterRank(hosts.procs[1]->Registration()).ok());
  auto init_b = hosts.InitB();  // only now: before the fix host a's init held the lock until here
  CHECK(init_a.get().ok());
  CHECK(init_b.get().ok());
  a_executor
      .Run([&] {
        hosts.ja->Close();
        return absl::OkStatus();
      })
      .wait();
}

// Item 3: a dead or slow peer fails the job at the deadline, naming the host.
TEST_CASE("a silent peer fails the collective at its deadline, naming the host") {
  TwoHosts hosts(GpuMode::kNccl, nullptr, false, true, /*op_timeout=*/absl::Milliseconds(200));
  for (int r = 0; r < 2; ++r) hosts.procs[r]->Submit<float>(64, {1, 1}, 3);
  absl::Status status = hosts.ja->Allreduce(HostATensor());
  CHECK(status.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(std::string(status.message()).find("host a") != std::string::npos);
  CHECK(hosts.world.thread_violations() == 0);
}

// Item 4: a normal end finalizes and destroys; only a failure aborts.
TEST_CASE("a normal end finalizes the communicators; none is aborted") {
  {
    TwoHosts hosts(GpuMode::kNccl, nullptr);
    hosts.RunAllreduce(ReduceOp::kSum);
    for (auto& p : hosts.procs) CHECK(p->Result<float>(64, 2, 3) == std::vector<float>{10, 20});
    auto closed_b = hosts.b_executor.Run([&] {
      hosts.jb->Close();
      return absl::OkStatus();
    });
    hosts.ja->Close();
    closed_b.wait();
    CHECK(hosts.world.finalized_communicators() == 4);
    CHECK(hosts.world.aborted_communicators() == 0);
    CHECK(hosts.world.thread_violations() == 0);
  }
  {  // destroyed without Close (the executor never ran it): aborted, as after a failure
    TwoHosts hosts(GpuMode::kNccl, nullptr);
    hosts.ja->Abort(absl::UnavailableError("host b is DOWN"));
    hosts.ja->Close();
    CHECK(hosts.world.aborted_communicators() == 2);
  }
}

}  // namespace
}  // namespace ard::gpu
