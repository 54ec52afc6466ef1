#include "daemon/gpu/gpu_plan.h"

#include "catch2/catch.hpp"

namespace ard::gpu {
namespace {

TEST_CASE("nccl mode numbers one rank per (host, GPU) across hosts") {
  std::vector<HostGpus> hosts = {{"a", "2.28.3", {1, 0, 1}}, {"b", "2.28.3", {0, 1}}};
  auto plan = PlanGpuJob("auto", hosts, 1);
  REQUIRE(plan.ok());
  CHECK(plan->mode == GpuMode::kNccl);
  CHECK(plan->comm_size == 4);  // a:0, a:1, b:0, b:1 (the two processes on a:1 share a rank)
  REQUIRE(plan->local_comm_ranks.size() == 2);
  CHECK(plan->local_comm_ranks[0].rank == 2);
  CHECK(plan->local_comm_ranks[0].device == 0);
  CHECK(plan->local_comm_ranks[1].rank == 3);
}

TEST_CASE("auto falls back to hierarchical when NCCL cannot span the hosts; nccl refuses") {
  std::vector<HostGpus> hosts = {{"a", "2.28.3", {0, 1}}, {"b", "2.21.5", {0}}};
  auto plan = PlanGpuJob("auto", hosts, 0);
  REQUIRE(plan.ok());
  CHECK(plan->mode == GpuMode::kHierarchical);
  CHECK(plan->comm_size == 2);
  CHECK(plan->reason.find("different NCCL") != std::string::npos);
  CHECK(PlanGpuJob("nccl", hosts, 0).status().code() == absl::StatusCode::kInvalidArgument);
  auto forced = PlanGpuJob("hierarchical", {{"a", "2.28.3", {3}}}, 0);
  REQUIRE(forced.ok());
  CHECK(forced->mode == GpuMode::kHierarchical);
  CHECK(forced->local_comm_ranks[0].device == 3);
}

TEST_CASE("a host without NCCL or a rank without a GPU is refused") {
  CHECK_FALSE(PlanGpuJob("auto", {{"a", "", {0}}}, 0).ok());
  CHECK_FALSE(PlanGpuJob("auto", {{"a", "2.28.3", {-1}}}, 0).ok());
  CHECK_FALSE(PlanGpuJob("auto", {{"a", "2.28.3", {0}}}, 1).ok());
}

TEST_CASE("a formed job's layout gives the plan's input and the communicator id") {
  JobLayout layout;
  auto* a = layout.add_hosts();
  a->set_name("a");
  a->set_nccl_version("2.28.3");
  a->add_gpu_devices(0);
  a->add_gpu_devices(1);
  auto* b = layout.add_hosts();
  b->set_name("b");
  b->set_nccl_version("2.28.3");
  b->add_gpu_devices(0);
  auto plan = PlanGpuJob("auto", HostGpusFromLayout(layout), 1);
  REQUIRE(plan.ok());
  CHECK(plan->comm_size == 3);
  CHECK(plan->local_comm_ranks[0].rank == 2);
  CHECK_FALSE(UniqueIdFromLayout(layout).ok());
  layout.set_nccl_unique_id(std::string(kUniqueIdBytes, 'x'));
  auto id = UniqueIdFromLayout(layout);
  REQUIRE(id.ok());
  CHECK((*id)[5] == 'x');
}

}  // namespace
}  // namespace ard::gpu
