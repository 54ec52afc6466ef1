#include "bench/sim_tensors.h"

#include <cstdio>

#include "proto/local_wire.h"

namespace ard::bench {

std::string SimTensorName(int i) {
  char name[32];
  std::snprintf(name, sizeof(name), "sim.grad.%04d", i);
  return name;
}

TensorMeta SimTensorMeta(int rank) {
  TensorMeta m;
  m.set_rank(rank);
  m.set_collective(static_cast<uint32_t>(wire::Collective::kAllreduce));
  m.set_dtype(static_cast<uint32_t>(wire::DataType::kFloat32));
  m.set_reduce_op(static_cast<uint32_t>(wire::ReduceOp::kSum));
  m.set_prescale(1.0);
  m.set_postscale(1.0);
  m.add_shape(1);
  m.set_group_id(-1);
  m.set_bytes(kSimTensorBytes);
  return m;
}

}  // namespace ard::bench
