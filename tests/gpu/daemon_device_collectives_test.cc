// On a GPU host: broadcast, allgather, reducescatter and allreduce with prescale/postscale of
// device tensors through a real daemon on the real CUDA/NCCL device. Two child processes on GPU 0
// use ard_submit_device; each checks its results and the result shapes. Skipped with a message
// without a GPU.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "client/allreduced_client.h"
#include "daemon/collectives/half_float.h"
#include "daemon/config/config_loader.h"
#include "daemon/daemon.h"
#include "daemon/gpu/cuda_device.h"
#include "tests/gpu/daemon_job_harness.h"

#ifdef ARD_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ard {
namespace {

#ifdef ARD_WITH_CUDA
// One device collective: `in` (host values) copied to the GPU, submitted, waited for; returns the
// result (out_bytes of it) and its shape, or exits with `fail`.
template <typename T>
std::vector<T> Run(ard_client* client, int rank, ard_request r, const std::vector<T>& in,
                   size_t out_count, std::vector<int64_t>* shape, int fail) {
  void* d_in = nullptr;
  void* d_out = nullptr;
  cudaMalloc(&d_in, in.size() * sizeof(T));
  cudaMalloc(&d_out, out_count * sizeof(T));
  cudaMemcpy(d_in, in.data(), in.size() * sizeof(T), cudaMemcpyHostToDevice);
  r.data = d_in;
  r.bytes = in.size() * sizeof(T);
  char err[512] = "";
  uint64_t handle = 0;
  if (ard_submit_device(client, &r, 0, d_out, nullptr, nullptr, nullptr, &handle, err,
                        sizeof(err)) != ARD_OK) {
    std::fprintf(stderr, "rank %d %s: %s\n", rank, r.name, err);
    _exit(fail);
  }
  ard_result result;
  if (ard_wait(client, handle, 30000, &result) != ARD_OK) {
    std::fprintf(stderr, "rank %d %s: %s\n", rank, r.name, result.message);
    _exit(fail + 1);
  }
  shape->assign(result.shape, result.shape + result.ndims);
  ard_release(client, handle);
  std::vector<T> out(out_count);
  cudaMemcpy(out.data(), d_out, out_count * sizeof(T),
             cudaMemcpyDeviceToHost);  // after the copy-out
  cudaFree(d_in);
  cudaFree(d_out);
  return out;
}

ard_request Request(int collective, int dtype, const char* name,
                    const std::vector<int64_t>& shape) {
  ard_request r;
  ard_request_init(&r);
  r.collective = collective;
  r.dtype = dtype;
  r.reduce_op = 1;  // sum
  r.name = name;
  r.ndims = static_cast<int>(shape.size());
  r.shape = shape.data();
  return r;
}

void Check(bool ok, int code, int rank, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "rank %d: wrong %s\n", rank, what);
  _exit(code);
}
#endif

// Rank `rank` of `size` (1 or 2) on GPU 0. One rank: every collective takes the native NCCL call
// (one process per GPU); two: the paths for several processes on one GPU.
[[noreturn]] void Child(int rank, int size, const std::string& socket, int from_parent) {
  char go = 0;
  if (read(from_parent, &go, 1) != 1 || go != 'g') _exit(0);
#ifdef ARD_WITH_CUDA
  ard_options options;
  ard_options_init(&options);
  options.socket_path = socket.c_str();
  options.job = "gpu-coll";
  options.rank = options.local_rank = rank;
  options.size = options.local_size = size;
  options.timeout_ms = 30000;
  ard_client* client = nullptr;
  char err[512] = "";
  if (ard_client_create(&options, &client, err, sizeof(err)) != ARD_OK) {
    std::fprintf(stderr, "rank %d: %s\n", rank, err);
    _exit(2);
  }
  cudaSetDevice(0);
  std::vector<int64_t> shape;
  const int root = size - 1;
  const float n = static_cast<float>(size);
  // Broadcast from the last rank: int32 [3].
  const std::vector<int64_t> s3 = {3};
  auto b = Run<int32_t>(
      client, rank,
      [&] {
        ard_request r = Request(3, 5, "bcast", s3);
        r.root_rank = root;
        return r;
      }(),
      {rank, -rank, 7 * rank}, 3, &shape, 10);
  Check(b == std::vector<int32_t>{root, -root, 7 * root} && shape == s3, 12, rank, "broadcast");
  // Allgather: float16 [1, 2] per rank -> [size, 2].
  const std::vector<int64_t> s12 = {1, 2};
  std::vector<uint16_t> mine = {collectives::FloatToHalf(rank + 0.5f),
                                collectives::FloatToHalf(-1.0f * rank)};
  auto g = Run<uint16_t>(client, rank, Request(2, 7, "gather", s12), mine, 2 * size, &shape, 20);
  Check(shape == std::vector<int64_t>{size, 2}, 22, rank, "allgather shape");
  for (int q = 0; q < size; ++q) {
    Check(collectives::HalfToFloat(g[2 * q]) == q + 0.5f &&
              collectives::HalfToFloat(g[2 * q + 1]) == -1.0f * q,
          23, rank, "allgather");
  }
  // Reducescatter: float [4] sum, prescale 2, postscale 0.5 (blocks of 4 / size rows), then
  // float [5] (uneven with two ranks: 3 and 2 rows).
  for (int64_t rows : {4, 5}) {
    const std::vector<int64_t> shape_in = {rows};
    ard_request rs = Request(5, 9, rows == 4 ? "scatter4" : "scatter5", shape_in);
    rs.prescale = 2;
    rs.postscale = 0.5;
    std::vector<float> x;
    for (int64_t i = 1; i <= rows; ++i) x.push_back(static_cast<float>(i * (rank + 1)));
    const int64_t mine_rows = rows / size + (rank < rows % size ? 1 : 0);
    const int64_t first = rank * (rows / size) + std::min<int64_t>(rank, rows % size);
    auto sc = Run<float>(client, rank, rs, x, mine_rows, &shape, 30);
    Check(shape == std::vector<int64_t>{mine_rows}, 32, rank, "reducescatter shape");
    for (int64_t i = 0; i < mine_rows; ++i) {  // sum over ranks of (i + 1) * (rank + 1)
      Check(sc[i] == static_cast<float>((first + i + 1) * size * (size + 1) / 2), 33, rank,
            "reducescatter");
    }
  }
  // Allreduce average with prescale 4 and postscale 0.25: the average itself.
  ard_request ar = Request(1, 10, "scaled", s3);
  ar.reduce_op = 2;  // average
  ar.prescale = 4;
  ar.postscale = 0.25;
  auto a = Run<double>(client, rank, ar, {1.0 + rank, 10, -4.0 * rank}, 3, &shape, 40);
  Check(a == std::vector<double>{1 + (n - 1) / 2, 10, -2.0 * (n - 1)}, 42, rank,
        "scaled allreduce");
  ard_client_destroy(client);
  _exit(0);
#else
  _exit(0);
#endif
}

// Forks `size` training processes and runs a daemon on the real device for them; prints a skip
// when there is no GPU.
void RunJob(int size) {
  testing::RunDaemonJob(size, "daemon device collectives (" + std::to_string(size) + " processes)",
                        [size](int rank, const std::string& socket, int release_fd) {
                          Child(rank, size, socket, release_fd);
                        });
}

TEST_CASE("device collectives through a real daemon: one process on the GPU (native NCCL calls)") {
  RunJob(1);
}

TEST_CASE("device collectives through a real daemon: two processes sharing the GPU") { RunJob(2); }

}  // namespace
}  // namespace ard
