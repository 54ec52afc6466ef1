// On a GPU host: the whole GPU path through a real daemon. Two child processes are training
// processes on GPU 0 using the client library's ard_submit_device (GPU_REGISTER on first use,
// staging copy-in, GPU_SUBMIT, copy-out on COMPLETE); the parent runs a Daemon with the real
// CUDA/NCCL device serving them over its local socket. Skipped with a message without a GPU.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "client/allreduced_client.h"
#include "daemon/config/config_loader.h"
#include "daemon/daemon.h"
#include "daemon/gpu/cuda_device.h"
#include "tests/gpu/daemon_job_harness.h"

#ifdef ARD_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ard {
namespace {

constexpr size_t kCount = 4096;
constexpr int kSteps = 3;

// A training process: waits for the daemon ('g', or 's' to skip), then kSteps device allreduces.
[[noreturn]] void Child(int rank, const std::string& socket, int from_parent) {
  char go = 0;
  if (read(from_parent, &go, 1) != 1 || go != 'g') _exit(0);
#ifdef ARD_WITH_CUDA
  ard_options options;
  ard_options_init(&options);
  options.socket_path = socket.c_str();
  options.job = "gpu-e2e";
  options.rank = options.local_rank = rank;
  options.size = options.local_size = 2;
  options.timeout_ms = 30000;
  ard_client* client = nullptr;
  char err[512] = "";
  if (ard_client_create(&options, &client, err, sizeof(err)) != ARD_OK) {
    std::fprintf(stderr, "rank %d: %s\n", rank, err);
    _exit(2);
  }
  cudaSetDevice(0);
  void* in = nullptr;
  void* out = nullptr;
  cudaMalloc(&in, kCount * 4);
  cudaMalloc(&out, kCount * 4);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> host(kCount);
    for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>((rank + 1) * i + step);
    cudaMemcpy(in, host.data(), kCount * 4, cudaMemcpyHostToDevice);
    int64_t shape[1] = {static_cast<int64_t>(kCount)};
    ard_request r;
    ard_request_init(&r);
    r.collective = 1;  // allreduce
    r.dtype = 9;       // float32
    r.reduce_op = 1;   // sum
    std::string name = "t" + std::to_string(step);
    r.name = name.c_str();
    r.ndims = 1;
    r.shape = shape;
    r.data = in;
    r.bytes = kCount * 4;
    uint64_t handle = 0;
    if (ard_submit_device(client, &r, 0, out, nullptr, nullptr, nullptr, &handle, err,
                          sizeof(err)) != ARD_OK) {
      std::fprintf(stderr, "rank %d: %s\n", rank, err);
      _exit(3);
    }
    ard_result result;
    if (ard_wait(client, handle, 30000, &result) != ARD_OK) {
      std::fprintf(stderr, "rank %d: %s\n", rank, result.message);
      _exit(4);
    }
    ard_release(client, handle);
    // The copy-out is on the legacy default stream: a blocking copy after it sees the result.
    cudaMemcpy(host.data(), out, kCount * 4, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < kCount; ++i) {
      if (host[i] != static_cast<float>(3 * i + 2 * step)) _exit(5);
    }
  }
  ard_client_destroy(client);
  _exit(0);
#else
  _exit(0);
#endif
}

TEST_CASE("two processes on one GPU allreduce device tensors through a real daemon") {
  testing::RunDaemonJob(
      2, "daemon device submit",
      [](int rank, const std::string& socket, int release_fd) { Child(rank, socket, release_fd); });
}

}  // namespace
}  // namespace ard
