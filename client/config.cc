#include "client/config.h"

#include <sys/un.h>

#include <climits>

namespace ard::client {
namespace {

std::string StringOption(const char* option, const EnvLookup& env, const char* var,
                         const char* fallback) {
  if (option != nullptr) return option;
  const char* value = env(var);
  if (value != nullptr && value[0] != '\0') return value;
  return fallback;
}

// An explicit option (> 0), else the variable, else the default.
Status UintOption(uint64_t option, const EnvLookup& env, const char* var, uint64_t fallback,
                  uint64_t* out) {
  *out = fallback;
  if (option > 0) {
    *out = option;
    return OkStatus();
  }
  const char* value = env(var);
  if (value == nullptr || value[0] == '\0') return OkStatus();
  int64_t parsed;
  if (!ParseInt64(value, 1, INT64_MAX, &parsed)) {
    return InvalidArgument(std::string("environment variable ") + var + "='" + value +
                           "' is not a positive integer");
  }
  *out = static_cast<uint64_t>(parsed);
  return OkStatus();
}

Status ResolveTimeout(int option, const EnvLookup& env, int* out) {
  *out = option != 0 ? option : kDefaultInitTimeoutMs;
  if (option != 0) return OkStatus();
  const char* value = env("ALLREDUCED_INIT_TIMEOUT_MS");
  if (value == nullptr || value[0] == '\0') return OkStatus();
  int64_t parsed;
  if (!ParseInt64(value, INT_MIN, INT_MAX, &parsed)) {
    return InvalidArgument(std::string("environment variable ALLREDUCED_INIT_TIMEOUT_MS='") +
                           value + "' is not an integer");
  }
  *out = parsed == 0 ? kDefaultInitTimeoutMs : static_cast<int>(parsed);
  return OkStatus();
}

void Override(int option, int* field) {
  if (option != -1) *field = option;
}

Status ResolveArena(const ard_options& options, const EnvLookup& env, ClientConfig* out) {
  ARD_CLIENT_RETURN_IF_ERROR(UintOption(options.arena_max_bytes, env, "ALLREDUCED_ARENA_MAX_BYTES",
                                        kDefaultArenaMaxBytes, &out->arena_max_bytes));
  ARD_CLIENT_RETURN_IF_ERROR(UintOption(options.arena_segment_bytes, env,
                                        "ALLREDUCED_ARENA_SEGMENT_BYTES", kDefaultSegmentBytes,
                                        &out->arena_segment_bytes));
  if (out->arena_max_bytes < kMinSegmentBytes) {
    return InvalidArgument("arena max bytes " + std::to_string(out->arena_max_bytes) +
                           " is below the minimum of " + std::to_string(kMinSegmentBytes));
  }
  uint64_t segment = out->arena_segment_bytes;
  if (segment < kMinSegmentBytes) segment = kMinSegmentBytes;
  segment = (segment + kMinSegmentBytes - 1) / kMinSegmentBytes * kMinSegmentBytes;
  if (segment > out->arena_max_bytes)
    segment = out->arena_max_bytes / kMinSegmentBytes * kMinSegmentBytes;
  out->arena_segment_bytes = segment;
  return OkStatus();
}

// The GPU staging sizes: environment only (ard_options has no fields for them).
Status ResolveGpu(const EnvLookup& env, ClientConfig* out) {
  ARD_CLIENT_RETURN_IF_ERROR(UintOption(0, env, "ALLREDUCED_GPU_ARENA_BYTES", kDefaultGpuArenaBytes,
                                        &out->gpu_arena_bytes));
  if (out->gpu_arena_bytes < kMinGpuArenaBytes) {
    return InvalidArgument(
        "environment variable ALLREDUCED_GPU_ARENA_BYTES=" + std::to_string(out->gpu_arena_bytes) +
        " is below the minimum of " + std::to_string(kMinGpuArenaBytes));
  }
  uint64_t events;
  ARD_CLIENT_RETURN_IF_ERROR(
      UintOption(0, env, "ALLREDUCED_GPU_EVENTS", kDefaultGpuEvents, &events));
  if (events > wire::kMaxGpuEvents) {
    return InvalidArgument("environment variable ALLREDUCED_GPU_EVENTS=" + std::to_string(events) +
                           " is outside 1.." + std::to_string(wire::kMaxGpuEvents));
  }
  out->gpu_events = static_cast<uint32_t>(events);
  return OkStatus();
}

// Elastic jobs: environment only ($ALLREDUCED_ELASTIC_MIN_NP turns it on; the elastic runner sets
// $ALLREDUCED_ELASTIC_ORDER to the rank a process had before a re-formation).
Status ResolveElastic(const EnvLookup& env, ClientConfig* out) {
  uint64_t min_np, max_np;
  ARD_CLIENT_RETURN_IF_ERROR(UintOption(0, env, "ALLREDUCED_ELASTIC_MIN_NP", 0, &min_np));
  ARD_CLIENT_RETURN_IF_ERROR(UintOption(0, env, "ALLREDUCED_ELASTIC_MAX_NP", 0, &max_np));
  // Neither a rank nor an order: no place (-1), after every process that has one (the daemons
  // take at most max_np ranks in this order).
  int64_t order = out->ranks.rank >= 0 ? out->ranks.rank : -1;
  const char* value = env("ALLREDUCED_ELASTIC_ORDER");
  if (value != nullptr && value[0] != '\0' && !ParseInt64(value, 0, INT64_MAX, &order)) {
    return InvalidArgument(std::string("environment variable ALLREDUCED_ELASTIC_ORDER='") + value +
                           "' is not an integer >= 0");
  }
  if (min_np == 0) return OkStatus();
  if (min_np > wire::kMaxSplits || max_np > wire::kMaxSplits || (max_np != 0 && max_np < min_np) ||
      order >= int64_t{wire::kMaxSplits} ||
      (max_np != 0 && order >= static_cast<int64_t>(max_np))) {
    return InvalidArgument("elastic settings ALLREDUCED_ELASTIC_MIN_NP=" + std::to_string(min_np) +
                           ", ALLREDUCED_ELASTIC_MAX_NP=" + std::to_string(max_np) +
                           ", ALLREDUCED_ELASTIC_ORDER=" + std::to_string(order) +
                           " must satisfy 1 <= min <= max <= " + std::to_string(wire::kMaxSplits) +
                           " and order < max");
  }
  out->elastic_min_np = static_cast<int>(min_np);
  out->elastic_max_np = max_np == 0 ? -1 : static_cast<int>(max_np);
  out->elastic_order = static_cast<int>(order);
  return OkStatus();
}

// ard_wait's spin: environment only, 0 (off, the default) .. kMaxWaitSpinUs.
Status ResolveWaitSpin(const EnvLookup& env, ClientConfig* out) {
  const char* value = env("ALLREDUCED_WAIT_SPIN_US");
  if (value == nullptr || value[0] == '\0') return OkStatus();
  int64_t parsed;
  if (!ParseInt64(value, 0, static_cast<int64_t>(kMaxWaitSpinUs), &parsed)) {
    return InvalidArgument(std::string("environment variable ALLREDUCED_WAIT_SPIN_US='") + value +
                           "' is not 0.." + std::to_string(kMaxWaitSpinUs) + " (microseconds)");
  }
  out->wait_spin_us = static_cast<uint64_t>(parsed);
  return OkStatus();
}

}  // namespace

Status ResolveConfig(const ard_options& options, const EnvLookup& env, ClientConfig* out) {
  ClientConfig config;
  config.socket_path =
      StringOption(options.socket_path, env, "ALLREDUCED_SOCKET", kDefaultSocketPath);
  if (config.socket_path.empty() || config.socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return InvalidArgument("socket path '" + config.socket_path + "' is empty or longer than " +
                           std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes");
  }
  bool all_explicit = options.rank != -1 && options.size != -1 && options.local_rank != -1 &&
                      options.local_size != -1;
  if (!all_explicit) ARD_CLIENT_RETURN_IF_ERROR(RanksFromEnv(env, &config.ranks));
  Override(options.rank, &config.ranks.rank);
  Override(options.size, &config.ranks.size);
  Override(options.local_rank, &config.ranks.local_rank);
  Override(options.local_size, &config.ranks.local_size);
  ARD_CLIENT_RETURN_IF_ERROR(ValidateRanks(config.ranks));
  JobName job;
  ARD_CLIENT_RETURN_IF_ERROR(ResolveJobName(options.job, env, config.ranks, &job));
  if (!IsValidJobName(job.name)) {
    return InvalidArgument("job name '" + job.name + "' from " + job.source + " must be 1-" +
                           std::to_string(wire::kJobNameBytes - 1) + " of [A-Za-z0-9._-]");
  }
  config.job = std::move(job.name);
  config.job_source = std::move(job.source);
  ARD_CLIENT_RETURN_IF_ERROR(ResolveTimeout(options.timeout_ms, env, &config.timeout_ms));
  ARD_CLIENT_RETURN_IF_ERROR(ResolveArena(options, env, &config));
  ARD_CLIENT_RETURN_IF_ERROR(ResolveGpu(env, &config));
  ARD_CLIENT_RETURN_IF_ERROR(ResolveElastic(env, &config));
  ARD_CLIENT_RETURN_IF_ERROR(ResolveWaitSpin(env, &config));
  *out = std::move(config);
  return OkStatus();
}

}  // namespace ard::client
