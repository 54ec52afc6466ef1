// libard_client.so loaded the way TensorFlow's op library will load it: dlopen with RTLD_LOCAL,
// every entry point through dlsym, a full submit/wait/release round trip against the fake daemon.
#include <dlfcn.h>

#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "client/allreduced_client.h"
#include "client/testing/fake_daemon.h"

namespace ard::client::testing {
namespace {

template <typename Fn>
Fn Symbol(void* lib, const char* name) {
  void* sym = ::dlsym(lib, name);
  INFO(name);
  REQUIRE(sym != nullptr);
  return reinterpret_cast<Fn>(sym);
}

TEST_CASE("libard_client.so works through dlopen/dlsym alone") {
  // Bazel runs tests from the runfiles root of this workspace.
  void* lib = ::dlopen("client/libard_client.so", RTLD_NOW | RTLD_LOCAL);
  INFO((lib == nullptr ? ::dlerror() : ""));
  REQUIRE(lib != nullptr);
  auto options_init = Symbol<decltype(&ard_options_init)>(lib, "ard_options_init");
  auto create = Symbol<decltype(&ard_client_create)>(lib, "ard_client_create");
  auto request_init = Symbol<decltype(&ard_request_init)>(lib, "ard_request_init");
  auto submit = Symbol<decltype(&ard_submit)>(lib, "ard_submit");
  auto wait = Symbol<decltype(&ard_wait)>(lib, "ard_wait");
  auto release = Symbol<decltype(&ard_release)>(lib, "ard_release");
  auto destroy = Symbol<decltype(&ard_client_destroy)>(lib, "ard_client_destroy");
  auto code_name = Symbol<decltype(&ard_code_name)>(lib, "ard_code_name");
  Symbol<decltype(&ard_client_topology)>(lib, "ard_client_topology");
  CHECK(::dlsym(lib, "_ZN3ard6client10InputArena4FreeERKNS1_4SlotE") == nullptr);  // hidden
  CHECK(std::string(code_name(14)) == "UNAVAILABLE");

  FakeDaemon daemon;
  ard_options options;
  options_init(&options);
  options.socket_path = daemon.socket_path().c_str();
  options.rank = 0;
  options.size = options.local_size = 1;
  options.local_rank = 0;
  options.timeout_ms = 10000;
  options.arena_segment_bytes = 1 << 20;
  char err[512] = "";
  ard_client* client = nullptr;
  REQUIRE(create(&options, &client, err, sizeof(err)) == 0);
  std::vector<float> values = {1, 2, 3, 4};
  int64_t shape[1] = {4};
  ard_request request;
  request_init(&request);
  request.collective = ARD_ALLREDUCE;
  request.dtype = ARD_FLOAT32;
  request.reduce_op = ARD_SUM;
  request.name = "dl";
  request.ndims = 1;
  request.shape = shape;
  request.data = values.data();
  request.bytes = 16;
  uint64_t handle = 0;
  REQUIRE(submit(client, &request, nullptr, nullptr, &handle, err, sizeof(err)) == 0);
  ard_result result;
  REQUIRE(wait(client, handle, -1, &result) == 0);
  CHECK(static_cast<const float*>(result.data)[3] == 8.0f);
  release(client, handle);
  destroy(client);
  ::dlclose(lib);
}

}  // namespace
}  // namespace ard::client::testing
