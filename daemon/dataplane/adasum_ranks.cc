#include "daemon/dataplane/adasum_ranks.h"

#include "daemon/collectives/adasum.h"
#include "daemon/collectives/reduce_kernels.h"

namespace ard::dataplane {

void AdasumOfRanks(const negotiation::ReadyTensor& t, const std::vector<int>& ranks, uint8_t* dst) {
  const wire::Submit& m = t.first().meta;
  const auto dtype = static_cast<wire::DataType>(m.dtype);
  const size_t count = m.bytes / wire::DataTypeSize(m.dtype);
  thread_local std::vector<std::vector<uint8_t>> scaled;
  if (scaled.size() < ranks.size()) scaled.resize(ranks.size());
  std::vector<const void*> leaves;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const auto& request = t.ranks[ranks[i]];
    if (!request || m.prescale == 1.0) {
      leaves.push_back(request ? request->input.data : nullptr);
      continue;
    }
    scaled[i].assign(request->input.data, request->input.data + m.bytes);
    collectives::Scale(scaled[i].data(), count, dtype, m.prescale);
    leaves.push_back(scaled[i].data());
  }
  collectives::AdasumTree(leaves, count, dtype, dst);
}

}  // namespace ard::dataplane
