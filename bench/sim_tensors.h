// The tensors bench/scale_sim's simulated hosts negotiate: `tensors` float32 sum allreduces of
// one element (4 bytes) each, named sim.grad.NNNN, every host one rank. One definition for both
// sides of a simulated host: what it sends the coordinator (SimFleet) and what it offers to the
// readiness rounds (SimDataPlane), which must equal the metadata the coordinator committed.
// Pure; any thread.
#pragma once

#include <string>

#include "proto/negotiation.pb.h"

namespace ard::bench {

inline constexpr size_t kSimTensorBytes = 4;  // one float32

std::string SimTensorName(int i);
// Rank `rank`'s metadata for every simulated tensor (the name travels beside it).
TensorMeta SimTensorMeta(int rank);

}  // namespace ard::bench
