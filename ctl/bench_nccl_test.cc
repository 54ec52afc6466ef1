#include "ctl/bench_nccl.h"

#include <regex>
#include <string>

#include "catch2/catch.hpp"
#include "proto/local_wire.h"

namespace ard::ctl {
namespace {

TEST_CASE("ProbeNccl loads libnccl.so.2 without a GPU, or says why it cannot") {
  std::string version, path;
  absl::Status st = ProbeNccl(&version, &path);
  if (st.ok()) {
    CHECK(std::regex_match(version, std::regex("[1-9][0-9]*\\.[0-9]+\\.[0-9]+")));
    CHECK(path.find("libnccl.so.2") != std::string::npos);
  } else {
    CHECK(st.code() == absl::StatusCode::kFailedPrecondition);
    CHECK(std::string(st.message()).rfind("cannot load NCCL: ", 0) == 0);
  }
}

TEST_CASE("NCCL reduces the dtypes and ops the daemon serves on GPUs, not 16-bit integers") {
  using wire::DataType;
  using wire::ReduceOp;
  for (DataType t :
       {DataType::kUint8, DataType::kInt8, DataType::kInt32, DataType::kInt64, DataType::kFloat16,
        DataType::kBfloat16, DataType::kFloat32, DataType::kFloat64}) {
    for (ReduceOp op :
         {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      CHECK(NcclSupports(static_cast<int>(t), static_cast<int>(op)).ok());
    }
  }
  CHECK_FALSE(NcclSupports(static_cast<int>(DataType::kInt16), 1).ok());
  CHECK_FALSE(NcclSupports(static_cast<int>(DataType::kBool), 1).ok());
  CHECK_FALSE(NcclSupports(9, 99).ok());
}

}  // namespace
}  // namespace ard::ctl
