// Adasum over one host's ranks of a tensor (daemon/collectives/adasum.h): the local step of
// allreduce with ReduceOp::kAdasum, shared by LocalCollective (every rank) and TcpCollective
// (this host's ranks, before the hosts combine their partial results). Runs on the job's executor
// thread (or inline on the control loop); keeps per-thread scratch buffers.
#pragma once

#include <cstdint>
#include <vector>

#include "daemon/negotiation/tensor_request.h"

namespace ard::dataplane {

// dst = the Adasum tree over t's inputs from `ranks` (in that order), each prescaled by the
// request's prescale; a rank that joined (no request) is a zero vector. No postscale.
void AdasumOfRanks(const negotiation::ReadyTensor& t, const std::vector<int>& ranks, uint8_t* dst);

}  // namespace ard::dataplane
