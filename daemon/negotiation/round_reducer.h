// How the readiness rounds reduce the data they carry (DESIGN.md "Steady state without the
// coordinator", carried slots): the data plane's kernels, injected, so that negotiation/ decides
// what is carried and where, and never reduces data itself. The job composes the production one
// (jobs::SteadyState over the reduce kernels); tests inject their own.
// Thread: whichever thread runs the round (const methods; implementations hold no state).
#pragma once

#include <cstddef>
#include <cstdint>

#include "daemon/negotiation/tensor_request.h"

namespace ard::negotiation {

class RoundReducer {
 public:
  virtual ~RoundReducer() = default;
  // Whether an allreduce of `dtype` with `op` can be carried (its data reduced in the combine).
  virtual bool Reduces(wire::DataType dtype, wire::ReduceOp op) const = 0;
  // into[i] = into[i] op from[i] for `count` elements of `dtype` (the left operand stays left:
  // the result may depend on the order, e.g. the sign of min(-0, +0)).
  virtual void ReduceInto(uint8_t* into, const uint8_t* from, size_t count, wire::DataType dtype,
                          wire::ReduceOp op) const = 0;
  // This host's ranks' reduction of held tensor `tensor` (its meta.bytes) into `out`, prescale
  // applied, as the data plane would compute it.
  virtual void Partial(const ReadyTensor& tensor, uint8_t* out) const = 0;
};

}  // namespace ard::negotiation
