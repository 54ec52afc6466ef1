// How `allreducectl bench` shapes one size for one collective, following nccl-tests' conventions
// (its *GetCollByteCount and *GetBw functions): per-rank input and output element counts, the
// size and count columns it reports, and the bus-bandwidth factor. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <vector>

namespace ard::ctl {

struct BenchLayout {
  uint64_t size_bytes = 0;       // the "size" column: max(input, output) bytes of one rank
  uint64_t count = 0;            // the "count" column (nccl-tests' paramcount, elements)
  uint64_t input_elements = 0;   // one rank's input (a 1-D tensor)
  uint64_t output_elements = 0;  // one rank's result
};

// Layout for a requested size: whole elements, and for allgather, alltoall and reducescatter a
// multiple of `ranks` elements. size_bytes == 0 when the size rounds to nothing (skip it).
BenchLayout LayoutFor(int collective, uint64_t requested_bytes, uint64_t element_bytes, int ranks);

// The layouts of `requested` sizes, without those that round to nothing and without repeats of
// the previous size (rounding can map neighbours onto one size).
std::vector<BenchLayout> LayoutsFor(int collective, const std::vector<uint64_t>& requested,
                                    uint64_t element_bytes, int ranks);

// nccl-tests' busbw / algbw: allreduce 2(n-1)/n; allgather, reducescatter, alltoall (n-1)/n;
// broadcast 1.
double BusBandwidthFactor(int collective, int ranks);

}  // namespace ard::ctl
