// Resolution of ard_options into a complete client configuration: explicit option fields first,
// then the environment, then defaults (documented on ard_options in allreduced_client.h).
// Pure function over an injectable environment; any thread.
#pragma once

#include <cstdint>
#include <string>

#include "client/allreduced_client.h"
#include "client/env_job.h"
#include "client/env_ranks.h"
#include "client/status.h"

namespace ard::client {

inline constexpr char kDefaultSocketPath[] = "/run/allreduced/allreduced.sock";
inline constexpr int kDefaultInitTimeoutMs = 60000;
inline constexpr uint64_t kDefaultSegmentBytes = 64ull << 20;
inline constexpr uint64_t kDefaultArenaMaxBytes = 16ull << 30;
inline constexpr uint64_t kMinSegmentBytes = 4096;
inline constexpr uint64_t kDefaultGpuArenaBytes = 64ull << 20;
inline constexpr uint64_t kMinGpuArenaBytes = 4096;
inline constexpr uint32_t kDefaultGpuEvents = 64;
inline constexpr uint64_t kMaxWaitSpinUs = 10000;

struct ClientConfig {
  std::string socket_path;
  std::string job;
  std::string job_source;  // where the name came from (env_job.h), for messages
  RankInfo ranks;
  int timeout_ms = kDefaultInitTimeoutMs;               // < 0: wait forever
  uint64_t arena_segment_bytes = kDefaultSegmentBytes;  // page multiple, <= arena_max_bytes
  uint64_t arena_max_bytes = kDefaultArenaMaxBytes;
  // GPU path: device staging arena and interprocess event pool, created at the first device
  // submit ($ALLREDUCED_GPU_ARENA_BYTES, $ALLREDUCED_GPU_EVENTS).
  uint64_t gpu_arena_bytes = kDefaultGpuArenaBytes;  // >= kMinGpuArenaBytes
  uint32_t gpu_events = kDefaultGpuEvents;           // 1..wire::kMaxGpuEvents
  // Elastic job ($ALLREDUCED_ELASTIC_MIN_NP, _MAX_NP, _ORDER): 0 = a fixed-size job; else the
  // fewest ranks it runs with, its most (-1: no bound) and this process's place in rank order
  // (-1: none, after every process with one).
  int elastic_min_np = 0;
  int elastic_max_np = -1;
  int elastic_order = -1;
  // ard_wait's bounded spin ($ALLREDUCED_WAIT_SPIN_US, 0..kMaxWaitSpinUs; 0: off, the default):
  // how long a waiting thread polls the socket before it sleeps (session_read.cc).
  uint64_t wait_spin_us = 0;
};

// InvalidArgument (naming the option or variable) for a bad job name, socket path, rank value or
// size, or a multi-rank job without a name (env_job.h); otherwise a complete config.
Status ResolveConfig(const ard_options& options, const EnvLookup& env, ClientConfig* out);

}  // namespace ard::client
