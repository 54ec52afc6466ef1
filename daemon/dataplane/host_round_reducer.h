// The readiness rounds' reducer (negotiation/round_reducer.h) over the data plane's own kernels:
// a carried tensor's partial is the one this host's allreduce would send (HostPartial), and the
// combine reduces with the same kernels, so a carried result is the allreduce's bit for bit.
// Stateless; any thread.
#pragma once

#include <vector>

#include "daemon/negotiation/round_reducer.h"

namespace ard::dataplane {

class HostRoundReducer : public negotiation::RoundReducer {
 public:
  // `local_ranks`: this host's ranks of the job, ascending.
  explicit HostRoundReducer(std::vector<int> local_ranks) : local_ranks_(std::move(local_ranks)) {}

  bool Reduces(wire::DataType dtype, wire::ReduceOp op) const override;
  void ReduceInto(uint8_t* into, const uint8_t* from, size_t count, wire::DataType dtype,
                  wire::ReduceOp op) const override;
  void Partial(const negotiation::ReadyTensor& tensor, uint8_t* out) const override;

 private:
  const std::vector<int> local_ranks_;
};

}  // namespace ard::dataplane
