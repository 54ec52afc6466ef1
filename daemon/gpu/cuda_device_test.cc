// On CI (no GPU, or a build without CUDA) the real device must refuse clearly instead of crashing;
// on a GPU host it must come up and report its GPUs. Either way the CUDA/NCCL code is linked.
#include "daemon/gpu/cuda_device.h"

#include <string>

#include "catch2/catch.hpp"

namespace ard::gpu {
namespace {

TEST_CASE("NewCudaDevice reports its GPUs or says clearly why there are none") {
  auto device = NewCudaDevice();
  if (device.ok()) {
    auto count = (*device)->DeviceCount();
    REQUIRE(count.ok());
    CHECK(*count > 0);
    CHECK((*device)->Describe().find("nccl") != std::string::npos);
    return;
  }
  const std::string message(device.status().message());
  if (device.status().code() == absl::StatusCode::kUnimplemented) {
    CHECK(message.find("without CUDA") != std::string::npos);
  } else {
    CHECK(device.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK(message.find("no CUDA") != std::string::npos);
  }
}

}  // namespace
}  // namespace ard::gpu
