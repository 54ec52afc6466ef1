// The steady state's settings' one set of defaults (DESIGN.md "Steady state without the
// coordinator"; proto/config.proto documents each setting): DaemonConfig's defaults
// (config_loader), the job engine's (jobs::SteadyStateOptions) and the data plane's handshake
// (dataplane::tcp::AlgorithmOptions) all start from these, so unit tests run what production runs.
#pragma once

#include <cstdint>

namespace ard::negotiation {

// DaemonConfig.steady_state: cross-host jobs agree on cached tensors in readiness rounds.
inline constexpr bool kSteadyStateDefault = true;
// DaemonConfig.steady_round_data_max_bytes: cached allreduces of at most this many bytes travel
// in the rounds themselves (0: none).
inline constexpr uint64_t kSteadyRoundDataMaxBytesDefault = 1024;
// DaemonConfig.steady_round_partial_wait_us: a vote waits up to this long for a cached tensor
// some local ranks submitted (0: never).
inline constexpr uint32_t kSteadyRoundPartialWaitUsDefault = 100;

}  // namespace ard::negotiation
