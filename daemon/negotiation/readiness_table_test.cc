#include "daemon/negotiation/readiness_table.h"

#include <cstring>

#include "catch2/catch.hpp"

namespace ard::negotiation {
namespace {

using wire::Collective;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TensorRequest Req(int rank, const std::string& name, Collective c = Collective::kAllreduce,
                  std::vector<int64_t> shape = {2, 3}, wire::DataType dtype = wire::DataType::kFloat32) {
  TensorRequest r;
  r.rank = rank;
  r.request_id = rank * 1000 + name.size();
  r.meta.collective = static_cast<uint32_t>(c);
  r.meta.dtype = static_cast<uint32_t>(dtype);
  r.meta.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kSum);
  r.meta.prescale = r.meta.postscale = 1.0;
  r.meta.group_id = -1;
  std::strncpy(r.meta.name, name.c_str(), sizeof(r.meta.name) - 1);
  r.meta.ndims = shape.size();
  for (size_t i = 0; i < shape.size(); ++i) r.meta.shape[i] = shape[i];
  return r;
}

TEST_CASE("a tensor is ready once every rank submitted it, in any order") {
  ReadinessTable t(3);
  std::vector<Response> ready;
  REQUIRE(t.Submit(Req(2, "b"), kT0, &ready).ok());
  REQUIRE(t.Submit(Req(0, "a"), kT0, &ready).ok());
  REQUIRE(t.Submit(Req(1, "a"), kT0, &ready).ok());
  CHECK(ready.empty());
  REQUIRE(t.Submit(Req(2, "a"), kT0, &ready).ok());
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].error.ok());
  CHECK(ready[0].tensors[0].name == "a");
  CHECK(ready[0].tensors[0].ranks.size() == 3);
  CHECK(t.pending_tensors() == 1);
}

TEST_CASE("a name already in flight from the same rank is refused, not recorded") {
  ReadinessTable t(2);
  std::vector<Response> ready;
  REQUIRE(t.Submit(Req(0, "a"), kT0, &ready).ok());
  absl::Status dup = t.Submit(Req(0, "a"), kT0, &ready);
  CHECK(dup.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(dup.message()).find("already in flight from rank 0") != std::string::npos);
  REQUIRE(t.Submit(Req(1, "a"), kT0, &ready).ok());
  CHECK(ready.size() == 1);
  CHECK(!t.Submit(Req(5, "a"), kT0, &ready).ok());
}

TEST_CASE("mismatches produce Horovod-shaped errors for every rank") {
  std::vector<Response> ready;
  {
    ReadinessTable t(2);
    t.Submit(Req(0, "x", Collective::kAllreduce, {2, 3}), kT0, &ready).IgnoreError();
    t.Submit(Req(1, "x", Collective::kAllreduce, {3, 3}), kT0, &ready).IgnoreError();
    REQUIRE(ready.size() == 1);
    CHECK(ready[0].error.message() ==
          "Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [2, 3], but "
          "another rank sent a tensor of shape [3, 3].");
    CHECK(ready[0].error.code() == absl::StatusCode::kFailedPrecondition);
  }
  ready.clear();
  {
    // GPU path: one rank's tensor in GPU memory, another's in host memory (after a host hop the
    // remote rank carries only the flag, TensorMeta.gpu).
    ReadinessTable t(2);
    TensorRequest on_gpu = Req(1, "x");
    on_gpu.gpu = wire::GpuPlacement{};
    t.Submit(Req(0, "x"), kT0, &ready).IgnoreError();
    t.Submit(on_gpu, kT0, &ready).IgnoreError();
    REQUIRE(ready.size() == 1);
    CHECK(ready[0].error.message() ==
          "Mismatched memory for x: rank 0 submitted it from host memory, but rank 1 from GPU "
          "memory.");
  }
  ready.clear();
  {
    ReadinessTable t(2);
    t.Submit(Req(0, "x"), kT0, &ready).IgnoreError();
    t.Submit(Req(1, "x", Collective::kAllreduce, {2, 3}, wire::DataType::kInt32), kT0, &ready)
        .IgnoreError();
    CHECK(ready[0].error.message() ==
          "Mismatched data types: One rank had type float32, but another rank had type int32.");
  }
  ready.clear();
  {
    ReadinessTable t(2);
    auto a = Req(0, "x", Collective::kBroadcast);
    auto b = Req(1, "x", Collective::kBroadcast);
    b.meta.root_rank = 1;
    t.Submit(a, kT0, &ready).IgnoreError();
    t.Submit(b, kT0, &ready).IgnoreError();
    CHECK(ready[0].error.message() ==
          "Mismatched BROADCAST root ranks: One rank specified root rank 0, but another rank "
          "specified root rank 1.");
  }
  ready.clear();
  {
    ReadinessTable t(2);
    auto a = Req(0, "x");
    auto b = Req(1, "x");
    b.meta.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kMax);
    t.Submit(a, kT0, &ready).IgnoreError();
    t.Submit(b, kT0, &ready).IgnoreError();
    CHECK(ready[0].error.message().find("One rank specified Sum, but another rank specified Max") !=
          std::string::npos);
  }
  ready.clear();
  {
    ReadinessTable t(2);
    t.Submit(Req(0, "x", Collective::kAllgather, {2, 3}), kT0, &ready).IgnoreError();
    t.Submit(Req(1, "x", Collective::kAllgather, {5, 4}), kT0, &ready).IgnoreError();
    CHECK(ready[0].error.message() ==
          "Mismatched ALLGATHER tensor shapes: One rank sent a tensor with dimension 1 equal to "
          "3, but another rank sent a tensor with dimension 1 equal to 4.");
  }
  ready.clear();
  {
    ReadinessTable t(2);
    t.Submit(Req(0, "x", Collective::kAllgather, {7, 3}), kT0, &ready).IgnoreError();
    t.Submit(Req(1, "x", Collective::kAllgather, {1, 3}), kT0, &ready).IgnoreError();
    CHECK(ready[0].error.ok());  // allgather: the first dimension may differ
  }
  ready.clear();
  {
    ReadinessTable t(2);
    t.Submit(Req(0, "x", Collective::kAllreduce), kT0, &ready).IgnoreError();
    t.Submit(Req(1, "x", Collective::kAllgather), kT0, &ready).IgnoreError();
    CHECK(ready[0].error.message() ==
          "Mismatched collective operations: One rank did an ALLREDUCE, but another rank did an "
          "ALLGATHER.");
  }
  ready.clear();
  {
    ReadinessTable t(2);
    t.Submit(Req(0, "x", Collective::kAllreduce, {4}, wire::DataType::kBool), kT0, &ready)
        .IgnoreError();
    t.Submit(Req(1, "x", Collective::kAllreduce, {4}, wire::DataType::kBool), kT0, &ready)
        .IgnoreError();
    CHECK(ready[0].error.message().find("ALLREDUCE does not support dtype bool") !=
          std::string::npos);
  }
}

TEST_CASE("Adasum is an allreduce of float host tensors: anything else fails on every rank") {
  auto adasum = [](int rank, Collective c, wire::DataType dtype, bool gpu) {
    TensorRequest r = Req(rank, "x", c, {4, 2}, dtype);
    r.meta.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kAdasum);
    if (gpu) r.gpu = wire::GpuPlacement{};
    return r;
  };
  auto outcome = [&](Collective c, wire::DataType dtype, bool gpu) {
    ReadinessTable t(2);
    std::vector<Response> ready;
    t.Submit(adasum(0, c, dtype, gpu), kT0, &ready).IgnoreError();
    t.Submit(adasum(1, c, dtype, gpu), kT0, &ready).IgnoreError();
    REQUIRE(ready.size() == 1);
    return ready[0].error;
  };
  for (auto dtype : {wire::DataType::kFloat16, wire::DataType::kFloat32, wire::DataType::kFloat64}) {
    CHECK(outcome(Collective::kAllreduce, dtype, false).ok());
  }
  const absl::Status integer = outcome(Collective::kAllreduce, wire::DataType::kInt32, false);
  CHECK(integer.code() == absl::StatusCode::kInvalidArgument);
  CHECK(integer.message() == "Adasum of x: it needs float16, float32 or float64, not int32.");
  CHECK(outcome(Collective::kAllreduce, wire::DataType::kBfloat16, false).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(outcome(Collective::kReducescatter, wire::DataType::kFloat32, false).message() ==
        "Adasum of x: REDUCESCATTER does not support it (allreduce does).");
  CHECK(outcome(Collective::kAllreduce, wire::DataType::kFloat32, true).message() ==
        "Adasum of x: it reduces host (CPU) memory only, not GPU tensors.");
}

TEST_CASE("a group is emitted whole, once all its tensors are ready") {
  ReadinessTable t(2);
  std::vector<Response> ready;
  for (const char* name : {"g1", "g0"}) {
    for (int rank = 0; rank < 2; ++rank) {
      auto r = Req(rank, name);
      r.meta.group_id = 7;
      r.meta.group_size = 2;
      REQUIRE(t.Submit(r, kT0, &ready).ok());
    }
    if (std::string(name) == "g1") CHECK(ready.empty());
  }
  REQUIRE(ready.size() == 1);
  REQUIRE(ready[0].tensors.size() == 2);
  CHECK(ready[0].tensors[0].name == "g0");
  CHECK(ready[0].tensors[1].name == "g1");
}

TEST_CASE("joined ranks count as present for allreduce; JOIN completes when all joined") {
  ReadinessTable t(3);
  std::vector<Response> ready;
  REQUIRE(t.Submit(Req(0, "a"), kT0, &ready).ok());
  REQUIRE(t.Submit(Req(2, "join", Collective::kJoin, {}), kT0, &ready).ok());
  CHECK(ready.empty());
  REQUIRE(t.Submit(Req(1, "a"), kT0, &ready).ok());
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].error.ok());
  CHECK(!ready[0].tensors[0].ranks[2].has_value());
  ready.clear();
  // Non-allreduce collectives cannot complete with a joined rank.
  REQUIRE(t.Submit(Req(0, "g", Collective::kAllgather), kT0, &ready).ok());
  REQUIRE(t.Submit(Req(1, "g", Collective::kAllgather), kT0, &ready).ok());
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].error.message().find("not supported while ranks have joined") !=
        std::string::npos);
  ready.clear();
  REQUIRE(t.Submit(Req(0, "join", Collective::kJoin, {}), kT0, &ready).ok());
  REQUIRE(t.Submit(Req(1, "join", Collective::kJoin, {}), kT0, &ready).ok());
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].collective == Collective::kJoin);
  CHECK(ready[0].join_last_rank == 1);
  // After a completed join, ranks are active again.
  ready.clear();
  REQUIRE(t.Submit(Req(0, "b"), kT0, &ready).ok());
  CHECK(ready.empty());
}

TEST_CASE("waiting tensors report who is missing; TakeAll empties the table") {
  ReadinessTable t(4);
  std::vector<Response> ready;
  REQUIRE(t.Submit(Req(0, "slow"), kT0, &ready).ok());
  REQUIRE(t.Submit(Req(2, "slow"), kT0, &ready).ok());
  REQUIRE(t.Submit(Req(1, "fresh"), kT0 + absl::Seconds(50), &ready).ok());
  auto waiting = t.WaitingLongerThan(kT0 + absl::Seconds(61), absl::Seconds(60));
  REQUIRE(waiting.size() == 1);
  CHECK(waiting[0].name == "slow");
  CHECK(waiting[0].missing == std::vector<int>{1, 3});
  CHECK(waiting[0].submitted == std::vector<int>{0, 2});
  CHECK(t.TakeAll().size() == 3);
  CHECK(t.pending_tensors() == 0);
}

TEST_CASE("a host's table is ready when its own ranks submitted; joins wait for the coordinator") {
  ReadinessTable t(4, {2, 3});  // this host runs ranks 2 and 3 of 4
  std::vector<Response> ready;
  REQUIRE(t.Submit(Req(2, "a"), kT0, &ready).ok());
  CHECK(ready.empty());
  REQUIRE(t.Submit(Req(3, "a"), kT0, &ready).ok());
  REQUIRE(ready.size() == 1);
  CHECK(ready[0].tensors[0].ranks[2].has_value());
  CHECK(!ready[0].tensors[0].ranks[0].has_value());
  ready.clear();
  REQUIRE(t.Submit(Req(2, "join", Collective::kJoin, {}), kT0, &ready).ok());
  REQUIRE(t.Submit(Req(3, "join", Collective::kJoin, {}), kT0, &ready).ok());
  CHECK(ready.empty());  // only the coordinator knows when every rank joined
  // While rank 3 has joined, rank 2 alone makes a tensor host-ready.
  REQUIRE(t.ResetJoins().size() == 2);
  REQUIRE(t.Submit(Req(3, "join", Collective::kJoin, {}), kT0, &ready).ok());
  REQUIRE(t.Submit(Req(2, "b"), kT0, &ready).ok());
  REQUIRE(ready.size() == 1);
  auto waiting = t.WaitingLongerThan(kT0, absl::ZeroDuration());
  CHECK(waiting.empty());
}

}  // namespace
}  // namespace ard::negotiation
