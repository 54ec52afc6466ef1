#include "daemon/gpu/fusion_layout.h"

#include "catch2/catch.hpp"

namespace ard::gpu {
namespace {

using wire::DataType;
using wire::ReduceOp;

TEST_CASE("tensors of one dtype and op pack into one run") {
  FusionLayout l = PlanFusion({{DataType::kFloat32, ReduceOp::kSum, 3},
                               {DataType::kFloat32, ReduceOp::kSum, 5},
                               {DataType::kFloat32, ReduceOp::kSum, 1}});
  CHECK(l.offsets == std::vector<size_t>{0, 12, 32});
  REQUIRE(l.runs.size() == 1);
  CHECK(l.runs[0].count == 9);
  CHECK(l.total_bytes == 36);
}

TEST_CASE("a dtype or op change starts an aligned run") {
  FusionLayout l = PlanFusion({{DataType::kFloat16, ReduceOp::kSum, 3},
                               {DataType::kFloat64, ReduceOp::kSum, 2},
                               {DataType::kFloat64, ReduceOp::kMax, 1},
                               {DataType::kFloat64, ReduceOp::kMax, 1}});
  CHECK(l.offsets == std::vector<size_t>{0, 256, 512, 520});
  REQUIRE(l.runs.size() == 3);
  CHECK(l.runs[0].count == 3);
  CHECK(l.runs[1].offset == 256);
  CHECK(l.runs[1].count == 2);
  CHECK(l.runs[2].op == ReduceOp::kMax);
  CHECK(l.runs[2].count == 2);
  CHECK(l.total_bytes == 528);
}

TEST_CASE("empty input plans nothing") {
  FusionLayout l = PlanFusion({});
  CHECK(l.runs.empty());
  CHECK(l.total_bytes == 0);
}

}  // namespace
}  // namespace ard::gpu
