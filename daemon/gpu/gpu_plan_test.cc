#include "daemon/gpu/gpu_plan.h"

#include "catch2/catch.hpp"
#include "daemon/gpu/device_query.h"

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

TEST_CASE("a cross-host job's GPU layout gives every host the same plan and communicator id") {
  JobLayout job;
  job.set_size(3);
  auto* ha = job.add_hosts();
  ha->set_name("a");
  ha->add_ranks(0);
  ha->add_ranks(2);  // a's local ranks 0, 1 are job ranks 0, 2
  auto* hb = job.add_hosts();
  hb->set_name("b");
  hb->add_ranks(1);
  GpuLayout gpus;
  GpuHost* a = gpus.add_hosts();
  a->set_nccl_version("2.28.3");
  a->add_rank_devices(0);
  a->add_rank_devices(1);
  a->set_nccl_unique_id(std::string(kUniqueIdBytes, 'a'));
  a->set_gpu_mode("auto");
  GpuHost* b = gpus.add_hosts();
  *b = *a;
  b->clear_rank_devices();
  b->add_rank_devices(0);
  b->clear_nccl_unique_id();  // only cross rank 0 offers one

  auto on_b = PlanFromLayout(job, gpus, 1);
  REQUIRE(on_b.ok());
  CHECK(on_b->plan.mode == GpuMode::kNccl);
  CHECK(on_b->plan.comm_size == 3);
  CHECK(on_b->plan.local_comm_ranks[0].rank == 2);
  REQUIRE(on_b->id.has_value());
  CHECK(on_b->comm_rank_of == std::vector<int>{0, 2, 1});  // a's GPUs 0, 1 then b's GPU 0
  CHECK((*on_b->id)[5] == 'a');  // cross rank 0's id: one communicator

  b->set_gpu_mode("hierarchical");  // one host asks for it: every host runs hierarchical
  for (int me : {0, 1}) {
    auto plan = PlanFromLayout(job, gpus, me);
    REQUIRE(plan.ok());
    CHECK(plan->plan.mode == GpuMode::kHierarchical);
    // Each host its own communicator: cross rank 0 uses its offer, b makes its own.
    CHECK(plan->id.has_value() == (me == 0));
    CHECK(plan->comm_rank_of.empty());
    CHECK(plan->plan.comm_size == (me == 0 ? 2 : 1));
  }

  a->set_nccl_unique_id("short");
  CHECK(PlanFromLayout(job, gpus, 0).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(PlanFromLayout(job, gpus, 1).ok());  // hierarchical: b does not need a's id
  gpus.mutable_hosts()->RemoveLast();
  CHECK(PlanFromLayout(job, gpus, 0).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("daemons on one machine sharing a GPU run hierarchical; nccl forced is refused") {
  HostGpus a{"a", "2.28.3", {0}, {"m1/0000:3b:00.0"}};
  HostGpus b{"b", "2.28.3", {0}, {"m1/0000:3b:00.0"}};  // the same physical GPU
  auto plan = PlanGpuJob("auto", {a, b}, 1);
  REQUIRE(plan.ok());
  CHECK(plan->mode == GpuMode::kHierarchical);
  CHECK_THAT(plan->reason, Catch::Contains("GPU m1/0000:3b:00.0 is used by hosts a and b"));
  CHECK(plan->comm_size == 1);
  auto forced = PlanGpuJob("nccl", {a, b}, 0);
  CHECK(forced.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(forced.status().message()), Catch::Contains("use hierarchical"));
  b.rank_gpu_ids = {"m2/0000:3b:00.0"};  // another machine: one communicator spans both
  plan = PlanGpuJob("auto", {a, b}, 1);
  REQUIRE(plan.ok());
  CHECK(plan->mode == GpuMode::kNccl);
  b.rank_gpu_ids = {""};  // unknown: no claim of sharing
  CHECK(PlanGpuJob("auto", {a, b}, 1)->mode == GpuMode::kNccl);
}

TEST_CASE("a GPU's physical id joins the machine id and its PCI bus id") {
  HostInfo info;
  CHECK(PhysicalIds(info).empty());
  GpuInfo* g = info.add_gpus();
  g->set_index(1);
  g->set_pci_bus_id("0000:3b:00.0");
  const std::vector<std::string> ids = PhysicalIds(info);
  REQUIRE(ids.size() == 2);
  CHECK(ids[0].empty());  // ordinal 0 not listed
  CHECK_THAT(ids[1], Catch::EndsWith("/0000:3b:00.0"));
  CHECK(ids[1].size() > std::string("/0000:3b:00.0").size());  // machine id in front
}

TEST_CASE("a process's GPU is found by PCI bus id whatever its CUDA_VISIBLE_DEVICES") {
  const std::vector<std::string> daemon = {"0000:3B:00.0", "0000:5E:00.0"};
  // CUDA_VISIBLE_DEVICES=1 in the process: its ordinal 0 is the daemon's 1.
  CHECK(*ResolveDevice(daemon, 0, "0000:5e:00.0") == 1);
  CHECK(*ResolveDevice(daemon, 0, "0000:3b:00.0") == 0);
  auto missing = ResolveDevice(daemon, 0, "0000:af:00.0");
  CHECK(missing.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(missing.status().message()), Catch::Contains("CUDA_VISIBLE_DEVICES"));
  CHECK(*ResolveDevice(daemon, 1, "") == 1);          // an old client without a bus id: the ordinal
  CHECK(*ResolveDevice({}, 3, "0000:3b:00.0") == 3);  // the daemon knows no bus ids
}

}  // namespace
}  // namespace ard::gpu
