#include "daemon/negotiation/response_codec.h"

#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/negotiation/meta_convert.h"

namespace ard::negotiation {
namespace {

// Bitwise, so that -0.0 and 0.0 (or two NaNs) are told apart and the encoding stays lossless.
bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

// Whether `b`'s metadata equals `a`'s in every field that travels once per tensor: all that
// ToMeta carries but the rank and the per-rank columns (first dimension, bytes, split values,
// GPU memory).
bool SharesCommon(const TensorRequest& a, const TensorRequest& b) {
  const wire::Submit& x = a.meta;
  const wire::Submit& y = b.meta;
  if (x.collective != y.collective || x.dtype != y.dtype || x.reduce_op != y.reduce_op ||
      x.root_rank != y.root_rank || !SameBits(x.prescale, y.prescale) ||
      !SameBits(x.postscale, y.postscale) || x.ndims != y.ndims || x.group_id != y.group_id ||
      x.group_size != y.group_size || a.splits.size() != b.splits.size()) {
    return false;
  }
  for (uint32_t d = 1; d < x.ndims && d < wire::kMaxDims; ++d) {
    if (x.shape[d] != y.shape[d]) return false;
  }
  return true;
}

absl::Status Malformed(const std::string& name, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("committed tensor ", name, ": ", why));
}

// Checks the columns' lengths against `present` taking-part ranks.
absl::Status CheckColumns(const CollectiveResponse::Tensor& t, size_t present) {
  auto fits = [present](int size) { return size == 0 || static_cast<size_t>(size) == present; };
  if (!fits(t.first_dims_size()) || !fits(t.bytes_size()) || !fits(t.gpu_size())) {
    return Malformed(t.name(), "a per-rank column's length is not the number of ranks");
  }
  if (t.first_dims_size() > 0 && t.common().shape_size() == 0) {
    return Malformed(t.name(), "first dimensions of a scalar");
  }
  const size_t per_rank = t.common().splits_size();
  if (t.splits_size() != 0 &&
      (per_rank == 0 || static_cast<size_t>(t.splits_size()) != present * per_rank)) {
    return Malformed(t.name(), "the splits column's length is not ranks x splits");
  }
  return absl::OkStatus();
}

// Writes the columns' entries of the `k`th taking-part rank, `rank`, into `meta`.
void SetColumns(const CollectiveResponse::Tensor& t, size_t k, int rank, TensorMeta* meta) {
  meta->set_rank(rank);
  if (t.first_dims_size() > 0) meta->set_shape(0, t.first_dims(k));
  if (t.bytes_size() > 0) meta->set_bytes(t.bytes(k));
  if (t.gpu_size() > 0) meta->set_gpu(t.gpu(k));
  const int per_rank = t.common().splits_size();
  for (int s = 0; t.splits_size() > 0 && s < per_rank; ++s) {
    meta->set_splits(s, t.splits(k * per_rank + s));
  }
}

}  // namespace

void EncodeTensor(const ReadyTensor& tensor, CollectiveResponse::Tensor* out) {
  out->set_name(tensor.name);
  std::vector<int> present;
  for (size_t r = 0; r < tensor.ranks.size(); ++r) {
    if (tensor.ranks[r]) {
      present.push_back(static_cast<int>(r));
    } else {
      out->add_absent_ranks(static_cast<int>(r));
    }
  }
  TensorMeta* common_meta = out->mutable_common();
  if (present.empty()) return;
  const TensorRequest& common = *tensor.ranks[present.front()];
  *common_meta = ToMeta(common);
  common_meta->clear_rank();
  // A column travels only when some rank (sharing the rest) differs from `common` in it.
  bool dims = false, bytes = false, splits = false, gpu = false;
  std::vector<bool> shares(present.size());
  for (size_t k = 0; k < present.size(); ++k) {
    const TensorRequest& r = *tensor.ranks[present[k]];
    shares[k] = SharesCommon(common, r);
    if (!shares[k]) continue;
    dims = dims || (common.meta.ndims > 0 && r.meta.shape[0] != common.meta.shape[0]);
    bytes = bytes || r.meta.bytes != common.meta.bytes;
    splits = splits || r.splits != common.splits;
    gpu = gpu || r.gpu.has_value() != common.gpu.has_value();
  }
  for (size_t k = 0; k < present.size(); ++k) {
    // A rank listed whole (in `others`) gets common's values in the columns.
    const TensorRequest& r = shares[k] ? *tensor.ranks[present[k]] : common;
    if (dims) out->add_first_dims(r.meta.shape[0]);
    if (bytes) out->add_bytes(r.meta.bytes);
    if (splits) out->mutable_splits()->Add(r.splits.begin(), r.splits.end());
    if (gpu) out->add_gpu(r.gpu.has_value());
    if (!shares[k]) {
      TensorMeta* other = out->add_others();
      *other = ToMeta(*tensor.ranks[present[k]]);
      other->set_rank(present[k]);
    }
  }
}

absl::StatusOr<ReadyTensor> DecodeTensor(const CollectiveResponse::Tensor& t, int job_size) {
  if (!t.has_common()) {
    return Malformed(t.name(), "no shared metadata (sent by a daemon of another version?)");
  }
  ReadyTensor tensor{t.name(), std::vector<RankEntry>(job_size)};
  std::vector<bool> absent(job_size, false);
  int previous = -1;
  for (int r : t.absent_ranks()) {
    if (r <= previous || r >= job_size) {
      return Malformed(t.name(), absl::StrCat("absent rank ", r, " out of order or range"));
    }
    absent[r] = true;
    previous = r;
  }
  const size_t present = job_size - t.absent_ranks_size();
  ARD_RETURN_IF_ERROR(CheckColumns(t, present));
  TensorMeta shared = t.common();  // each rank's columns are written into it in turn
  // No columns (an allreduce, a broadcast, ...): the shared metadata is validated once and every
  // rank sharing it gets a copy with its own rank.
  std::optional<TensorRequest> same;
  if (present > 0 && t.first_dims_size() + t.bytes_size() + t.splits_size() + t.gpu_size() == 0) {
    ARD_ASSIGN_OR_RETURN(same, FromMeta(shared, t.name(), job_size));
  }
  int other = 0;
  size_t k = 0;  // index of the next taking-part rank in the columns
  for (int r = 0; r < job_size; ++r) {
    if (absent[r]) continue;
    if (other < t.others_size() && t.others(other).rank() == r) {
      ARD_ASSIGN_OR_RETURN(tensor.ranks[r], FromMeta(t.others(other++), t.name(), job_size));
    } else if (same) {
      tensor.ranks[r] = *same;
      tensor.ranks[r]->rank = r;
    } else {
      SetColumns(t, k, r, &shared);
      ARD_ASSIGN_OR_RETURN(tensor.ranks[r], FromMeta(shared, t.name(), job_size));
    }
    ++k;
  }
  if (other != t.others_size()) {
    return Malformed(t.name(), absl::StrCat("whole metadata for rank ", t.others(other).rank(),
                                            ", which does not take part (or out of order)"));
  }
  return tensor;
}

absl::StatusOr<Response> DecodeResponse(const CollectiveResponse& cr, int job_size) {
  Response response;
  response.collective = static_cast<wire::Collective>(cr.collective());
  response.error = absl::Status(static_cast<absl::StatusCode>(cr.error_code()), cr.error());
  response.join_last_rank = cr.join_last_rank();
  for (const auto& t : cr.tensors()) {
    absl::StatusOr<ReadyTensor> tensor = DecodeTensor(t, job_size);
    if (!tensor.ok()) return tensor.status();
    response.tensors.push_back(*std::move(tensor));
  }
  return response;
}

}  // namespace ard::negotiation
