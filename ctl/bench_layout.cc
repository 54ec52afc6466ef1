#include "ctl/bench_layout.h"

#include "proto/local_wire.h"

namespace ard::ctl {

using wire::Collective;

BenchLayout LayoutFor(int collective, uint64_t requested_bytes, uint64_t element_bytes, int ranks) {
  BenchLayout l;
  const uint64_t n = ranks;
  const uint64_t count = element_bytes == 0 ? 0 : requested_bytes / element_bytes;
  switch (static_cast<Collective>(collective)) {
    case Collective::kAllreduce:
    case Collective::kBroadcast:
      l.input_elements = l.output_elements = l.count = count;
      break;
    case Collective::kAllgather:
      l.count = l.input_elements = count / n;
      l.output_elements = l.input_elements * n;
      break;
    case Collective::kReducescatter:
      l.count = l.output_elements = count / n;
      l.input_elements = l.output_elements * n;
      break;
    case Collective::kAlltoall:
      l.count = count / n;
      l.input_elements = l.output_elements = l.count * n;
      break;
    default:
      return BenchLayout{};
  }
  if (l.count == 0) return BenchLayout{};
  const uint64_t larger =
      l.input_elements > l.output_elements ? l.input_elements : l.output_elements;
  l.size_bytes = larger * element_bytes;
  return l;
}

std::vector<BenchLayout> LayoutsFor(int collective, const std::vector<uint64_t>& requested,
                                    uint64_t element_bytes, int ranks) {
  std::vector<BenchLayout> out;
  for (uint64_t size : requested) {
    BenchLayout l = LayoutFor(collective, size, element_bytes, ranks);
    if (l.size_bytes == 0) continue;
    if (!out.empty() && out.back().size_bytes == l.size_bytes) continue;
    out.push_back(l);
  }
  return out;
}

double BusBandwidthFactor(int collective, int ranks) {
  const double n = ranks;
  switch (static_cast<Collective>(collective)) {
    case Collective::kAllreduce:
      return 2.0 * (n - 1) / n;
    case Collective::kAllgather:
    case Collective::kReducescatter:
    case Collective::kAlltoall:
      return (n - 1) / n;
    case Collective::kBroadcast:
      return 1.0;
    default:
      return 0.0;
  }
}

}  // namespace ard::ctl
