#include "daemon/negotiation/fusion_planner.h"

#include <cstring>

#include "catch2/catch.hpp"

namespace ard::negotiation {
namespace {

Response Ready(const std::string& name, uint64_t bytes, wire::DataType dtype = wire::DataType::kFloat32,
               wire::Collective c = wire::Collective::kAllreduce) {
  TensorRequest r;
  r.rank = 0;
  r.meta.collective = static_cast<uint32_t>(c);
  r.meta.dtype = static_cast<uint32_t>(dtype);
  r.meta.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kSum);
  r.meta.prescale = r.meta.postscale = 1.0;
  r.meta.bytes = bytes;
  std::strncpy(r.meta.name, name.c_str(), sizeof(r.meta.name) - 1);
  Response response;
  response.collective = c;
  response.tensors.push_back(ReadyTensor{name, {r}});
  return response;
}

std::vector<std::string> Names(const Response& r) {
  std::vector<std::string> out;
  for (const auto& t : r.tensors) out.push_back(t.name);
  return out;
}

TEST_CASE("compatible allreduces fuse up to the threshold, in order") {
  std::vector<Response> ready = {Ready("a", 40), Ready("b", 40), Ready("c", 40), Ready("d", 10)};
  auto plan = PlanFusion(std::move(ready), 100);
  REQUIRE(plan.size() == 2);
  CHECK(Names(plan[0]) == std::vector<std::string>{"a", "b", "d"});
  CHECK(Names(plan[1]) == std::vector<std::string>{"c"});
  CHECK(ResponseBytes(plan[0]) == 90);
}

TEST_CASE("different dtypes, other collectives and errors do not fuse") {
  Response bad = Ready("e", 4);
  bad.error = absl::FailedPreconditionError("mismatch");
  std::vector<Response> ready = {Ready("a", 4), Ready("b", 4, wire::DataType::kFloat16),
                                 Ready("g", 4, wire::DataType::kFloat32, wire::Collective::kAllgather),
                                 bad, Ready("c", 4)};
  auto plan = PlanFusion(std::move(ready), 1 << 20);
  REQUIRE(plan.size() == 4);
  CHECK(Names(plan[0]) == std::vector<std::string>{"a", "c"});
  CHECK(Names(plan[1]) == std::vector<std::string>{"b"});
  CHECK(plan[2].collective == wire::Collective::kAllgather);
  CHECK(!plan[3].error.ok());
}

TEST_CASE("GPU tensors and host tensors do not fuse with each other") {
  Response on_gpu = Ready("g1", 4), on_gpu2 = Ready("g2", 4);
  on_gpu.tensors[0].ranks[0]->gpu = wire::GpuPlacement{};
  on_gpu2.tensors[0].ranks[0]->gpu = wire::GpuPlacement{};
  std::vector<Response> ready;
  ready.push_back(std::move(on_gpu));
  ready.push_back(Ready("h1", 4));
  ready.push_back(std::move(on_gpu2));
  ready.push_back(Ready("h2", 4));
  auto plan = PlanFusion(std::move(ready), 1 << 20);
  REQUIRE(plan.size() == 2);
  CHECK(Names(plan[0]) == std::vector<std::string>{"g1", "g2"});
  CHECK(Names(plan[1]) == std::vector<std::string>{"h1", "h2"});
}

TEST_CASE("a tensor larger than the threshold travels alone") {
  auto plan = PlanFusion({Ready("big", 500), Ready("small", 5)}, 100);
  REQUIRE(plan.size() == 2);
  CHECK(Names(plan[0]) == std::vector<std::string>{"big"});
}

TEST_CASE("a thousand small tensors fuse into few responses, none lost") {
  std::vector<Response> ready;
  for (int i = 0; i < 1000; ++i) ready.push_back(Ready("t" + std::to_string(i), 4096));
  auto plan = PlanFusion(std::move(ready), 1 << 20);
  size_t total = 0;
  for (const auto& r : plan) total += r.tensors.size();
  CHECK(total == 1000);
  CHECK(plan.size() == 4);  // 256 tensors of 4 KiB per MiB
}

}  // namespace
}  // namespace ard::negotiation
