// TEST HELPER for the real-GPU daemon tests: forks `size` training processes (before the parent
// touches CUDA), then runs a Daemon on the real CUDA/NCCL device for them over a local socket.
// Each child runs `child(rank, socket, release_fd)`: it must read one byte from release_fd first
// ('g': the daemon is up, go; 's': skip, exit 0) and exit with 0 on success. Without a GPU the
// children are released with 's' and "SKIPPED (no GPU) <what>: <why>" is printed.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "daemon/config/config_loader.h"
#include "daemon/daemon.h"
#include "daemon/gpu/cuda_device.h"

namespace ard::testing {

using ChildMain = std::function<void(int rank, const std::string& socket, int release_fd)>;

inline void RunDaemonJob(int size, const std::string& what, const ChildMain& child) {
  char tmpl[] = "/tmp/ard-gpj.XXXXXX";  // short: Unix socket paths are limited to 107 bytes
  const std::string dir = mkdtemp(tmpl);
  const std::string socket = dir + "/d.sock";
  std::vector<std::array<int, 2>> down(size);
  std::vector<pid_t> pids(size);
  for (int r = 0; r < size; ++r) {  // fork before the parent touches CUDA
    REQUIRE(pipe(down[r].data()) == 0);
    pids[r] = fork();
    REQUIRE(pids[r] >= 0);
    if (pids[r] == 0) {
      child(r, socket, down[r][0]);
      _exit(0);
    }
  }
  auto release_and_reap = [&](char how) {
    std::vector<int> codes;
    for (int r = 0; r < size; ++r) {
      REQUIRE(write(down[r][1], &how, 1) == 1);
      close(down[r][1]);
    }
    for (int r = 0; r < size; ++r) {
      int st = 0;
      waitpid(pids[r], &st, 0);
      codes.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : 100);
    }
    return codes;
  };
  if (auto probe = gpu::NewCudaDevice(); !probe.ok()) {
    release_and_reap('s');
    std::filesystem::remove_all(dir);
    std::printf("SKIPPED (no GPU) %s: %s\n", what.c_str(),
                std::string(probe.status().message()).c_str());
    return;
  }
  DaemonConfig c = config::Defaults();
  c.set_cluster_address("127.0.0.1:0");
  c.set_host_name("gpu-host");
  c.set_local_socket(socket);
  REQUIRE(config::ValidateAndComplete(&c).ok());
  {
    Daemon daemon(c);  // opens the real CUDA device
    REQUIRE(daemon.Start().ok());
    CHECK(release_and_reap('g') == std::vector<int>(size, 0));
    daemon.Shutdown();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace ard::testing
