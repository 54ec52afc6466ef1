// The data of `allreducectl bench --check`: each rank fills its input with small integers that
// depend on (rank, element index) and are exact in every dtype, and checks every element of its
// result against what the collective must produce, computed in the dtype's own arithmetic with
// the daemon's documented semantics (reduction in rank order, 16-bit floats rounded to nearest
// even after every step, integers wrapping, average = the sum times 1/n at the end; see
// daemon/collectives/reduce_kernels.h). Patterns repeat with a short period, so expected values
// are computed once per residue and the check is a byte comparison. Pure; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "ctl/bench_layout.h"

namespace ard::ctl {

struct BenchPatternSpec {
  int collective = 1;  // wire::Collective
  int dtype = 9;       // wire::DataType
  int reduce_op = 1;   // wire::ReduceOp (reductions only)
  int ranks = 1;
  BenchLayout layout;
};

// The input of `rank`: layout.input_elements elements, written into `input` (resized).
void FillPattern(const BenchPatternSpec& spec, int rank, std::vector<uint8_t>* input);

// How many of the layout.output_elements elements at `output` differ (bitwise) from the result
// `rank` must receive. Root of broadcast: rank 0.
uint64_t CountWrong(const BenchPatternSpec& spec, int rank, const uint8_t* output);

// Encodes `value` (finite) in a dtype, rounding to nearest even for the float types, wrapping for
// the integer ones; and back. For tests and for the reference arithmetic.
void StoreElement(int dtype, double value, uint8_t* out);
double LoadElement(int dtype, const uint8_t* in);

}  // namespace ard::ctl
