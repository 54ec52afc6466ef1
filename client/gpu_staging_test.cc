// The client's GPU path without a GPU must fail with one clear message (and on a GPU host it must
// produce a registration payload whose layout the daemon decodes).
#include "client/gpu_staging.h"

#include <cstring>
#include <string>

#include "catch2/catch.hpp"
#include "client/allreduced_client.h"

namespace ard::client {
namespace {

TEST_CASE("GPU staging on this machine: a clear 'no CUDA driver/device' or a valid registration") {
  std::unique_ptr<GpuStaging> staging;
  Status status = GpuStaging::Create(0, 1 << 20, 4, &staging);
  char err[256] = {};
  int code = ard_gpu_probe(0, err, sizeof(err));
  if (!status.ok()) {
    CHECK(status.code() == wire::Code::kFailedPrecondition);
    CHECK(status.message().rfind("no CUDA driver/device: ", 0) == 0);
    CHECK(code == ARD_FAILED_PRECONDITION);
    CHECK(std::string(err).rfind("no CUDA driver/device: ", 0) == 0);
    WARN("no GPU here: " << status.message());
    return;
  }
  CHECK(code == 0);
  REQUIRE(staging->RegisterPayload().size() ==
          sizeof(wire::GpuRegister) + 4 * wire::kIpcHandleBytes);
  wire::GpuRegister reg;
  std::memcpy(&reg, staging->RegisterPayload().data(), sizeof(reg));
  CHECK(reg.num_events == 4);
  CHECK(reg.arena_bytes == 1 << 20);
}

TEST_CASE("bad staging parameters are refused before touching the driver") {
  std::unique_ptr<GpuStaging> staging;
  CHECK(GpuStaging::Create(0, 0, 4, &staging).code() == wire::Code::kInvalidArgument);
  CHECK(GpuStaging::Create(0, 1 << 20, 0, &staging).code() == wire::Code::kInvalidArgument);
  CHECK(GpuStaging::Create(0, 1 << 20, wire::kMaxGpuEvents + 1, &staging).code() ==
        wire::Code::kInvalidArgument);
}

}  // namespace
}  // namespace ard::client
