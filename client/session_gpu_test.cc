// The client's GPU path on the host double of the CUDA driver (client/testing/fake_cuda.cc) and the
// fake daemon: a device submit goes through the staging arena and back, and the staging arena and
// events are freed only after the daemon said GPU_UNREGISTERED (issue 23, item 6: freeing memory
// the daemon still has open through CUDA IPC is undefined and poisons its context).
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"
#include "client/allreduced_client.h"
#include "client/cuda_driver.h"
#include "client/testing/client_test_util.h"
#include "client/testing/fake_daemon.h"

namespace ard::client {
namespace {

using testing::FakeDaemon;
using testing::FloatTensor;
using wire::MsgType;

// The double's counters, from the same library the client loads.
struct FakeCuda {
  int (*live_allocations)() = nullptr;
  int (*live_events)() = nullptr;
  int (*misuses)() = nullptr;
  int (*async_copies)() = nullptr;
};

std::string DoublePath() {
  if (const char* set = getenv(cuda::kDriverLibraryEnv)) return set;
  const char* srcdir = getenv("TEST_SRCDIR");
  const char* workspace = getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && workspace != nullptr) {
    return std::string(srcdir) + "/" + workspace + "/client/testing/libfake_cuda.so";
  }
  char exe[4096] = {};  // outside Bazel (the GPU pack): beside the test binary
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::string dir = n > 0 ? std::string(exe, static_cast<size_t>(n)) : std::string("./x");
  return dir.substr(0, dir.rfind('/')) + "/libfake_cuda.so";
}

const FakeCuda& Double() {
  static FakeCuda* fake = [] {
    const std::string path = DoublePath();
    setenv(cuda::kDriverLibraryEnv, path.c_str(), 1);  // before the client's first load
    setenv("ALLREDUCED_GPU_EVENTS", "4", 1);
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    INFO(path << ": " << (lib == nullptr ? dlerror() : "loaded"));
    REQUIRE(lib != nullptr);
    auto* f = new FakeCuda();
    f->live_allocations = reinterpret_cast<int (*)()>(dlsym(lib, "ard_fake_cuda_live_allocations"));
    f->live_events = reinterpret_cast<int (*)()>(dlsym(lib, "ard_fake_cuda_live_events"));
    f->misuses = reinterpret_cast<int (*)()>(dlsym(lib, "ard_fake_cuda_misuses"));
    REQUIRE(f->live_allocations != nullptr);
    REQUIRE(f->live_events != nullptr);
    f->async_copies = reinterpret_cast<int (*)()>(dlsym(lib, "ard_fake_cuda_async_copies"));
    REQUIRE(f->misuses != nullptr);
    REQUIRE(f->async_copies != nullptr);
    return f;
  }();
  return *fake;
}

// One device allreduce of {1, 2, 3} on "GPU 0" of the double; returns its result.
std::vector<float> DeviceAllreduce(ard_client* client, const char* name) {
  FloatTensor t(name, {1.0f, 2.0f, 3.0f});
  std::vector<float> out(3, 0.0f);
  char err[512] = "";
  uint64_t handle = 0;
  int code = ard_submit_device(client, &t.request, 0, out.data(), nullptr, nullptr, nullptr,
                               &handle, err, sizeof(err));
  INFO(err);
  REQUIRE(code == ARD_OK);
  ard_result result;
  REQUIRE(ard_wait(client, handle, testing::kWaitMs, &result) == ARD_OK);
  CHECK(result.bytes == 0);  // device results are in device_out
  ard_release(client, handle);
  return out;
}

TEST_CASE("a device submit through the double: into the staging arena, reduced there, out again") {
  const FakeCuda& cuda = Double();
  FakeDaemon daemon;
  ard_client* client = testing::MustCreate(testing::TestOptions(daemon));
  CHECK(DeviceAllreduce(client, "g") == std::vector<float>{2.0f, 4.0f, 6.0f});
  CHECK(DeviceAllreduce(client, "g") == std::vector<float>{2.0f, 4.0f, 6.0f});  // range reused
  auto state = daemon.State();
  CHECK(state.gpu_registers == 1);
  CHECK(state.gpu_submits.size() == 2);
  ard_client_destroy(client);
  CHECK(daemon.State().violations.empty());
  CHECK(cuda.misuses() == 0);
}

TEST_CASE("destroy frees the staging arena and events only after GPU_UNREGISTERED, then BYE") {
  const FakeCuda& cuda = Double();
  testing::FakeDaemonOptions options;
  options.answer_gpu_unregister = false;
  FakeDaemon daemon(options);
  ard_client* client = testing::MustCreate(testing::TestOptions(daemon));
  const int allocations = cuda.live_allocations(), events = cuda.live_events();
  DeviceAllreduce(client, "g");
  REQUIRE(cuda.live_allocations() == allocations + 1);
  REQUIRE(cuda.live_events() == events + 4);

  std::thread destroyer([client] { ard_client_destroy(client); });
  REQUIRE(daemon.WaitFor([](const auto& s) { return s.gpu_unregisters.size() == 1; }));
  // The daemon has not answered: nothing is freed, and the client has not said BYE yet.
  CHECK(cuda.live_allocations() == allocations + 1);
  CHECK(cuda.live_events() == events + 4);
  CHECK(daemon.State().byes == 0);
  daemon.AnswerGpuUnregister();
  destroyer.join();
  CHECK(cuda.live_allocations() == allocations);
  CHECK(cuda.live_events() == events);
  REQUIRE(daemon.WaitFor([](const auto& s) { return s.byes == 1; }));
  auto state = daemon.State();
  REQUIRE(state.frames.size() >= 2);
  CHECK(state.frames[state.frames.size() - 2] == static_cast<uint16_t>(MsgType::kGpuUnregister));
  CHECK(state.frames.back() == static_cast<uint16_t>(MsgType::kBye));
  CHECK(cuda.misuses() == 0);
}

TEST_CASE("a daemon that never confirms: the staging stays allocated (never freed under it)") {
  const FakeCuda& cuda = Double();
  testing::FakeDaemonOptions options;
  options.answer_gpu_unregister = false;
  FakeDaemon daemon(options);
  ard_options client_options = testing::TestOptions(daemon);
  client_options.timeout_ms = 200;  // the wait for GPU_UNREGISTERED, bounded by the client timeout
  ard_client* client = testing::MustCreate(client_options);
  const int allocations = cuda.live_allocations(), events = cuda.live_events();
  DeviceAllreduce(client, "g");
  ard_client_destroy(client);
  CHECK(daemon.State().gpu_unregisters.size() == 1);
  CHECK(cuda.live_allocations() == allocations + 1);  // kept until the process exits
  CHECK(cuda.live_events() == events + 4);
  CHECK(cuda.misuses() == 0);
}

TEST_CASE("a daemon that hangs up before confirming: the staging stays allocated") {
  const FakeCuda& cuda = Double();
  testing::FakeDaemonOptions options;
  options.answer_gpu_unregister = false;
  FakeDaemon daemon(options);
  ard_options client_options = testing::TestOptions(daemon);
  client_options.timeout_ms = -1;  // no timeout: the connection's end ends the wait
  ard_client* client = testing::MustCreate(client_options);
  const int allocations = cuda.live_allocations();
  DeviceAllreduce(client, "g");
  std::thread destroyer([client] { ard_client_destroy(client); });
  REQUIRE(daemon.WaitFor([](const auto& s) { return s.gpu_unregisters.size() == 1; }));
  daemon.CloseConnections();
  destroyer.join();
  CHECK(cuda.live_allocations() == allocations + 1);
  CHECK(cuda.misuses() == 0);
}

// One device submit of `t`; the number of device copies it made.
int CopiesOf(ard_client* client, FloatTensor& t, void* out) {
  const int before = Double().async_copies();
  char err[512] = "";
  uint64_t handle = 0;
  int code = ard_submit_device(client, &t.request, 0, out, nullptr, nullptr, nullptr, &handle, err,
                               sizeof(err));
  INFO(err);
  REQUIRE(code == ARD_OK);
  ard_result result;
  REQUIRE(ard_wait(client, handle, testing::kWaitMs, &result) == ARD_OK);
  ard_release(client, handle);
  return Double().async_copies() - before;
}

TEST_CASE("device copies: a broadcast copies in only at its root, and out only where needed") {
  Double();
  testing::FakeDaemonOptions options;
  options.welcome.size = 2;  // this process is rank 0 of 2
  options.welcome.local_size = 2;
  FakeDaemon daemon(options);
  ard_options client_options = testing::TestOptions(daemon);
  client_options.size = 2;
  client_options.local_size = 2;
  ard_client* client = testing::MustCreate(client_options);

  FloatTensor sum("sum", {1.0f, 2.0f});
  std::vector<float> out(2, 0.0f);
  CHECK(CopiesOf(client, sum, out.data()) == 2);  // in and out
  CHECK(out == std::vector<float>{2.0f, 4.0f});

  FloatTensor from_1("b1", {1.0f, 2.0f});  // rank 1's broadcast: this input is never read
  from_1.request.collective = ARD_BROADCAST;
  from_1.request.root_rank = 1;
  CHECK(CopiesOf(client, from_1, out.data()) == 1);  // out only
  uint32_t bits;
  std::memcpy(&bits, out.data(), 4);
  CHECK(bits == 0x42424242u);  // what the (fake) daemon delivered

  FloatTensor from_0("b0", {5.0f, 6.0f});  // this rank's broadcast
  from_0.request.collective = ARD_BROADCAST;
  from_0.request.root_rank = 0;
  CHECK(CopiesOf(client, from_0, out.data()) == 2);  // into another output: in and out
  CHECK(out == std::vector<float>{5.0f, 6.0f});
  CHECK(CopiesOf(client, from_0, from_0.values.data()) == 1);  // in place: in only
  CHECK(from_0.values == std::vector<float>{5.0f, 6.0f});
  ard_client_destroy(client);
  CHECK(daemon.State().violations.empty());
  CHECK(Double().misuses() == 0);
}

TEST_CASE("a client that never used the GPU says BYE without GPU_UNREGISTER") {
  FakeDaemon daemon;
  ard_client* client = testing::MustCreate(testing::TestOptions(daemon));
  ard_client_destroy(client);
  REQUIRE(daemon.WaitFor([](const auto& s) { return s.byes == 1; }));
  CHECK(daemon.State().gpu_unregisters.empty());
}

}  // namespace
}  // namespace ard::client
