// ard_submit_device (GPU path) on a machine without a GPU: misuse is refused before the driver is
// touched, a device submit fails with one clear "no CUDA driver/device" error and sends nothing,
// and the client keeps working for host tensors. (On a GPU host the device path runs end to end in
// tests/gpu.)
#include <string>

#include "catch2/catch.hpp"
#include "client/allreduced_client.h"
#include "client/testing/client_test_util.h"
#include "client/testing/fake_daemon.h"

namespace ard::client {
namespace {

using testing::FakeDaemon;
using testing::FloatTensor;

TEST_CASE("ard_submit_device without a GPU: a clear error, and host submits still work") {
  FakeDaemon daemon;
  ard_client* client = testing::MustCreate(testing::TestOptions(daemon));
  FloatTensor t("g", {1.0f, 2.0f});
  char err[512] = "";
  uint64_t handle = 0;
  float out[2];

  // Alltoall is not served for device tensors: refused as misuse, whatever the machine has.
  FloatTensor b("a2a", {1.0f, 2.0f});
  b.request.collective = ARD_ALLTOALL;
  CHECK(ard_submit_device(client, &b.request, 0, out, nullptr, nullptr, nullptr, &handle, err,
                          sizeof(err)) == ARD_INVALID_ARGUMENT);
  CHECK(std::string(err).find("only allreduce, broadcast, allgather and reducescatter") !=
        std::string::npos);
  CHECK(ard_submit_device(client, &t.request, 0, nullptr, nullptr, nullptr, nullptr, &handle, err,
                          sizeof(err)) == ARD_INVALID_ARGUMENT);

  char probe[256] = "";
  if (ard_gpu_probe(0, probe, sizeof(probe)) == ARD_OK) {
    WARN("a GPU is present: the no-GPU half of this test is skipped (tests/gpu covers it)");
  } else {
    int code = ard_submit_device(client, &t.request, 0, out, nullptr, nullptr, nullptr, &handle,
                                 err, sizeof(err));
    CHECK(code == ARD_FAILED_PRECONDITION);
    CHECK(std::string(err).rfind("no CUDA driver/device: ", 0) == 0);
  }

  // The connection is intact: a host allreduce completes.
  REQUIRE(ard_submit(client, &t.request, nullptr, nullptr, &handle, err, sizeof(err)) == ARD_OK);
  ard_result result;
  CHECK(ard_wait(client, handle, testing::kWaitMs, &result) == ARD_OK);
  CHECK(daemon.State().submits.size() == 1);  // the refused device submits sent nothing
  ard_release(client, handle);
  ard_client_destroy(client);
}

}  // namespace
}  // namespace ard::client
