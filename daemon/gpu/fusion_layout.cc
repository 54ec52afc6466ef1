#include "daemon/gpu/fusion_layout.h"

namespace ard::gpu {

FusionLayout PlanFusion(const std::vector<FusionTensor>& tensors) {
  FusionLayout layout;
  size_t cursor = 0;
  for (const FusionTensor& t : tensors) {
    size_t esize = wire::DataTypeSize(static_cast<uint32_t>(t.dtype));
    bool extend = !layout.runs.empty() && layout.runs.back().dtype == t.dtype &&
                  layout.runs.back().op == t.op;
    if (!extend) {
      cursor = (cursor + kFusionAlignBytes - 1) / kFusionAlignBytes * kFusionAlignBytes;
      layout.runs.push_back(FusionRun{cursor, 0, t.dtype, t.op});
    }
    layout.offsets.push_back(cursor);
    layout.runs.back().count += t.count;
    cursor += t.count * esize;
  }
  layout.total_bytes = cursor;
  return layout;
}

}  // namespace ard::gpu
