#include "daemon/negotiation/meta_convert.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/submit_check.h"

namespace ard::negotiation {

TensorMeta ToMeta(const TensorRequest& r) {
  TensorMeta m;
  m.set_rank(r.rank);
  m.set_collective(r.meta.collective);
  m.set_dtype(r.meta.dtype);
  m.set_reduce_op(r.meta.reduce_op);
  m.set_root_rank(r.meta.root_rank);
  m.set_prescale(r.meta.prescale);
  m.set_postscale(r.meta.postscale);
  for (uint32_t d = 0; d < r.meta.ndims; ++d) m.add_shape(r.meta.shape[d]);
  for (int64_t s : r.splits) m.add_splits(s);
  m.set_group_id(r.meta.group_id);
  m.set_group_size(r.meta.group_size);
  m.set_bytes(r.meta.bytes);
  m.set_gpu(r.gpu.has_value());
  return m;
}

uint64_t Signature(const HostReadyTensor& tensor) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const TensorMeta& m : tensor.ranks()) {
    for (char c : m.SerializeAsString()) {
      h ^= static_cast<uint8_t>(c);
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

absl::StatusOr<TensorRequest> FromMeta(const TensorMeta& m, const std::string& name,
                                       int job_size) {
  if (m.rank() < 0 || m.rank() >= job_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", m.rank(), " outside job of size ",
                                                   job_size));
  }
  if (name.empty() || name.size() >= wire::kTensorNameBytes) {
    return absl::InvalidArgumentError("tensor name empty or too long");
  }
  if (m.shape_size() > wire::kMaxDims || m.splits_size() > static_cast<int>(wire::kMaxSplits)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, ": too many dims or splits"));
  }
  TensorRequest r;
  r.rank = m.rank();
  r.meta.collective = m.collective();
  r.meta.dtype = m.dtype();
  r.meta.reduce_op = m.reduce_op();
  r.meta.root_rank = m.root_rank();
  r.meta.prescale = m.prescale();
  r.meta.postscale = m.postscale();
  std::memcpy(r.meta.name, name.data(), name.size());
  r.meta.ndims = m.shape_size();
  for (int d = 0; d < m.shape_size(); ++d) r.meta.shape[d] = m.shape(d);
  r.meta.bytes = m.bytes();
  r.meta.group_id = m.group_id();
  r.meta.group_size = m.group_size();
  r.meta.num_splits = m.splits_size();
  r.splits.assign(m.splits().begin(), m.splits().end());
  // Another host's GPU tensor: only that it lies in GPU memory matters here (the placement in
  // its staging arena is its host's business).
  if (m.gpu()) r.gpu = wire::GpuPlacement{};
  if (auto s = wire::ValidateSubmit(r.meta, r.splits); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", name, " of rank ", m.rank(), ": ",
                                                   s.message()));
  }
  return r;
}

}  // namespace ard::negotiation
