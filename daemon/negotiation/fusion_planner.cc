#include "daemon/negotiation/fusion_planner.h"

#include <tuple>

namespace ard::negotiation {
namespace {

bool Fusable(const Response& r) {
  return r.error.ok() && r.collective == wire::Collective::kAllreduce && !r.tensors.empty();
}

// Responses fuse when every element is reduced the same way, from the same kind of memory (GPU
// tensors go to the GPU executor, host tensors to the host data plane).
auto Kind(const Response& r) {
  const TensorRequest& first = r.tensors[0].first();
  const wire::Submit& m = first.meta;
  return std::make_tuple(m.dtype, m.reduce_op, m.prescale, m.postscale, first.gpu.has_value());
}

}  // namespace

uint64_t ResponseBytes(const Response& response) {
  uint64_t bytes = 0;
  for (const auto& t : response.tensors) bytes += t.first().meta.bytes;
  return bytes;
}

std::vector<Response> PlanFusion(std::vector<Response> ready, uint64_t threshold_bytes) {
  std::vector<Response> out;
  std::vector<uint64_t> sizes;  // bytes of out[i]
  for (Response& r : ready) {
    const uint64_t bytes = ResponseBytes(r);
    if (Fusable(r) && bytes <= threshold_bytes) {
      bool placed = false;
      for (size_t i = 0; i < out.size() && !placed; ++i) {
        if (Fusable(out[i]) && Kind(out[i]) == Kind(r) && sizes[i] + bytes <= threshold_bytes) {
          for (auto& t : r.tensors) out[i].tensors.push_back(std::move(t));
          sizes[i] += bytes;
          placed = true;
        }
      }
      if (placed) continue;
    }
    sizes.push_back(bytes);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace ard::negotiation
