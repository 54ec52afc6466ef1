// On a GPU host: the whole GPU path minus the socket. Two child processes play training processes
// on GPU 0 (the client half: GpuStaging over the dlopen'ed driver API), the parent plays the
// daemon (IpcCache + GpuJob over the real CUDA/NCCL device). Children register their staging arena
// and events, copy inputs in and record; the daemon reduces (two processes on one GPU: the
// host-staged path), records, "completes"; children wait on the event and copy out.
// Skipped with a message without a GPU.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "client/gpu_staging.h"
#include "daemon/gpu/gpu_job.h"
#include "daemon/gpu/ipc_cache.h"
#include "tests/gpu/gpu_skip.h"

#ifdef ARD_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ard::gpu::testing {
namespace {

constexpr size_t kCount = 4096;
constexpr uint64_t kOffset = 4096;

bool ReadAll(int fd, void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void WriteAll(int fd, const void* buf, size_t n) {
  const char* p = static_cast<const char*>(buf);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// The training process: writes [status byte][payload size][payload], waits for "done", verifies.
[[noreturn]] void Child(int rank, int to_parent, int from_parent) {
#ifdef ARD_WITH_CUDA
  std::unique_ptr<client::GpuStaging> staging;
  client::Status s = client::GpuStaging::Create(0, 1 << 20, 2, &staging);
  char ok = s.ok() ? 1 : 0;
  WriteAll(to_parent, &ok, 1);
  if (!s.ok()) _exit(0);
  uint32_t n = static_cast<uint32_t>(staging->RegisterPayload().size());
  WriteAll(to_parent, &n, sizeof(n));
  WriteAll(to_parent, staging->RegisterPayload().data(), n);
  std::vector<float> in(kCount);
  for (size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>((rank + 1) * i);
  void* src = nullptr;
  cudaSetDevice(0);
  cudaMalloc(&src, kCount * 4);
  cudaMemcpy(src, in.data(), kCount * 4, cudaMemcpyHostToDevice);
  // Framework stream: the legacy default stream (nullptr).
  if (!staging->CopyIn(kOffset, src, kCount * 4, 1, nullptr).ok()) _exit(2);
  char go;
  if (!ReadAll(from_parent, &go, 1)) _exit(3);  // the daemon's COMPLETE
  if (!staging->CopyOut(kOffset, src, kCount * 4, 1, nullptr).ok()) _exit(4);
  std::vector<float> out(kCount);
  cudaMemcpy(out.data(), src, kCount * 4, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < kCount; ++i) {
    if (out[i] != static_cast<float>(3 * i) / 2) _exit(5);  // average of i and 2i
  }
  _exit(0);
#else
  char ok = 0;
  WriteAll(to_parent, &ok, 1);
  _exit(0);
#endif
}

TEST_CASE("two processes on one GPU through the daemon's GpuJob, via CUDA IPC") {
  int up[2][2], down[2][2];
  pid_t pids[2];
  for (int r = 0; r < 2; ++r) {  // fork before the parent touches CUDA
    REQUIRE(pipe(up[r]) == 0);
    REQUIRE(pipe(down[r]) == 0);
    pids[r] = fork();
    REQUIRE(pids[r] >= 0);
    if (pids[r] == 0) Child(r, up[r][1], down[r][0]);
  }
  auto reap = [&] {
    int codes[2];
    for (int r = 0; r < 2; ++r) {
      close(down[r][1]);
      int st = 0;
      waitpid(pids[r], &st, 0);
      codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 100;
    }
    return std::vector<int>{codes[0], codes[1]};
  };
  std::vector<GpuRegistration> regs(2);
  for (int r = 0; r < 2; ++r) {
    char ok = 0;
    REQUIRE(ReadAll(up[r][0], &ok, 1));
    if (!ok) {
      reap();
      std::printf("SKIPPED (no GPU) ipc end to end: the client could not open GPU 0\n");
      return;
    }
    uint32_t n = 0;
    REQUIRE(ReadAll(up[r][0], &n, sizeof(n)));
    std::string payload(n, '\0');
    REQUIRE(ReadAll(up[r][0], payload.data(), n));
    wire::GpuRegister wire_reg;
    std::memcpy(&wire_reg, payload.data(), sizeof(wire_reg));
    regs[r].rank = r;
    regs[r].pid = static_cast<uint32_t>(pids[r]);
    regs[r].device = wire_reg.device;
    regs[r].arena_bytes = wire_reg.arena_bytes;
    std::memcpy(regs[r].arena.data(), wire_reg.arena_handle, kIpcHandleBytes);
    for (uint32_t e = 0; e < wire_reg.num_events; ++e) {
      IpcHandle h;
      std::memcpy(h.data(), payload.data() + sizeof(wire_reg) + e * kIpcHandleBytes,
                  kIpcHandleBytes);
      regs[r].events.push_back(h);
    }
  }
  auto device = DeviceOrSkip("ipc end to end");
  if (device == nullptr) {
    reap();
    return;
  }
  {
    IpcCache cache(*device);
    GpuJobOptions options;
    options.world_ranks = 2;
    options.comm_size = 1;
    options.local_comm_ranks = {{0, 0}};
    GpuJob job(*device, cache, options);
    for (auto& reg : regs) REQUIRE(job.RegisterRank(reg).ok());
    REQUIRE(job.Init(*device->NewUniqueId()).ok());
    REQUIRE(job.CheckInput(0, kOffset, kCount * 4, 1).ok());
    CHECK(job.CheckInput(0, kOffset, kCount * 4, 2).code() == absl::StatusCode::kInvalidArgument);
    GpuTensor t{FusionTensor{wire::DataType::kFloat32, wire::ReduceOp::kAverage, kCount},
                {{0, kOffset, 1}, {1, kOffset, 1}}};
    REQUIRE(job.Allreduce({t}).ok());
    for (int r = 0; r < 2; ++r) WriteAll(down[r][1], "c", 1);  // COMPLETE
    CHECK(reap() == std::vector<int>{0, 0});
    for (auto& reg : regs) cache.ReleaseProcess(reg.pid);
  }
}

}  // namespace
}  // namespace ard::gpu::testing
