#include "daemon/dataplane/host_round_reducer.h"

#include "daemon/collectives/reduce_kernels.h"
#include "daemon/dataplane/tcp_allreduce.h"

namespace ard::dataplane {

bool HostRoundReducer::Reduces(wire::DataType dtype, wire::ReduceOp op) const {
  return op != wire::ReduceOp::kAdasum && collectives::ReductionSupported(dtype);
}

void HostRoundReducer::ReduceInto(uint8_t* into, const uint8_t* from, size_t count,
                                  wire::DataType dtype, wire::ReduceOp op) const {
  collectives::ReduceInto(into, from, count, dtype, op);
}

void HostRoundReducer::Partial(const negotiation::ReadyTensor& tensor, uint8_t* out) const {
  HostPartial(tensor, local_ranks_, out);
}

}  // namespace ard::dataplane
