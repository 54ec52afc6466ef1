// Tensor fusion (DESIGN.md "Negotiation", Horovod's fusion buffer): the coordinator packs ready
// allreduce responses of the same kind (dtype, reduce op, scale factors) into one response, up to
// a byte threshold (default 128 MiB, like Horovod), so one cross-host collective moves many small
// tensors. Greedy and order-preserving: a response joins the first open fused response of its
// kind that still has room, else opens a new one at its position. Errors, groups larger than the
// threshold and other collectives pass through unchanged. Pure.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/negotiation/tensor_request.h"

namespace ard::negotiation {

// DaemonConfig.fusion_threshold_bytes's default (config_loader and jobs::SteadyStateOptions).
inline constexpr uint64_t kFusionThresholdBytesDefault = 128ull << 20;

std::vector<Response> PlanFusion(std::vector<Response> ready, uint64_t threshold_bytes);

// Bytes one rank contributes to a response (the fusion buffer size it needs).
uint64_t ResponseBytes(const Response& response);

}  // namespace ard::negotiation
