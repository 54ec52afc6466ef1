#include "daemon/dataplane/local_collective.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/collectives/reduce_kernels.h"
#include "daemon/collectives/row_split.h"
#include "daemon/dataplane/adasum_ranks.h"

namespace ard::dataplane {
namespace {

using negotiation::ReadyTensor;
using negotiation::TensorRequest;

struct Layout {
  size_t elem = 0;       // bytes per element
  uint64_t row = 0;      // bytes per row of the first dimension (elements of shape[1:])
  std::vector<int64_t> rest;  // shape[1:]
};

Layout LayoutOf(const wire::Submit& m) {
  Layout l;
  l.elem = wire::DataTypeSize(m.dtype);
  uint64_t row_elems = 1;
  for (uint32_t d = 1; d < m.ndims; ++d) {
    row_elems *= m.shape[d];
    l.rest.push_back(m.shape[d]);
  }
  l.row = row_elems * l.elem;
  return l;
}

// memcpy that tolerates empty ranges with null pointers (empty tensors have no arena bytes).
void Copy(uint8_t* dst, const uint8_t* src, uint64_t n) {
  if (n > 0) memcpy(dst, src, n);
}

// Reduces elements [first, first + count) of every present rank's input into `dst`, applying
// prescale to each input, then postscale (and 1/size for Average) to the result.
void ReduceRange(const ReadyTensor& t, int size, uint64_t first, uint64_t count, uint8_t* dst) {
  const wire::Submit& m = t.first().meta;
  const auto dtype = static_cast<wire::DataType>(m.dtype);
  const auto op = static_cast<wire::ReduceOp>(m.reduce_op);
  const size_t elem = wire::DataTypeSize(m.dtype);
  const uint64_t bytes = count * elem;
  thread_local std::vector<uint8_t> scratch;
  bool have = false;
  for (const auto& r : t.ranks) {
    if (!r || count == 0) continue;  // a joined rank contributes the identity: nothing
    const uint8_t* src = r->input.data + first * elem;
    if (!have) {
      memcpy(dst, src, bytes);
      collectives::Scale(dst, count, dtype, m.prescale);
      have = true;
      continue;
    }
    if (m.prescale != 1.0) {
      scratch.resize(bytes);
      memcpy(scratch.data(), src, bytes);
      collectives::Scale(scratch.data(), count, dtype, m.prescale);
      src = scratch.data();
    }
    collectives::ReduceInto(dst, src, count, dtype, op);
  }
  if (!have) collectives::FillIdentity(dst, count, dtype, op);
  double post = m.postscale;
  if (op == wire::ReduceOp::kAverage) post /= size;
  collectives::Scale(dst, count, dtype, post);
}

absl::StatusOr<std::shared_ptr<shm::ResultSlot>> Allocate(const SlotAllocator& allocate,
                                                          uint64_t bytes) {
  if (bytes == 0) return std::shared_ptr<shm::ResultSlot>();
  return allocate(bytes);
}

absl::Status Allreduce(const ReadyTensor& t, int size, const SlotAllocator& allocate,
                       RankResults* out) {
  const wire::Submit& m = t.first().meta;
  auto slot = Allocate(allocate, m.bytes);
  if (!slot.ok()) return slot.status();
  const uint64_t count = m.bytes / wire::DataTypeSize(m.dtype);
  if (*slot && m.reduce_op == static_cast<uint32_t>(wire::ReduceOp::kAdasum)) {
    std::vector<int> ranks(size);
    for (int r = 0; r < size; ++r) ranks[r] = r;
    AdasumOfRanks(t, ranks, (*slot)->data);
    collectives::Scale((*slot)->data, count, static_cast<wire::DataType>(m.dtype), m.postscale);
  } else if (*slot) {
    ReduceRange(t, size, 0, count, (*slot)->data);
  }
  for (int r = 0; r < size; ++r) {
    if (t.ranks[r]) (*out)[r] = RankResult{*slot, ShapeOf(m), {}};
  }
  return absl::OkStatus();
}

absl::Status Allgather(const ReadyTensor& t, int size, const SlotAllocator& allocate,
                       RankResults* out) {
  const Layout l = LayoutOf(t.first().meta);
  int64_t rows = 0;
  std::vector<int64_t> per_rank(size, 0);
  for (int r = 0; r < size; ++r) {
    per_rank[r] = t.ranks[r]->meta.shape[0];
    rows += per_rank[r];
  }
  auto slot = Allocate(allocate, rows * l.row);
  if (!slot.ok()) return slot.status();
  uint64_t offset = 0;
  for (int r = 0; r < size && *slot; ++r) {
    Copy((*slot)->data + offset, t.ranks[r]->input.data, t.ranks[r]->input.bytes);
    offset += t.ranks[r]->input.bytes;
  }
  std::vector<int64_t> shape = {rows};
  shape.insert(shape.end(), l.rest.begin(), l.rest.end());
  for (int r = 0; r < size; ++r) (*out)[r] = RankResult{*slot, shape, per_rank};
  return absl::OkStatus();
}

absl::Status Broadcast(const ReadyTensor& t, int size, const SlotAllocator& allocate,
                       RankResults* out) {
  const TensorRequest& root = *t.ranks[t.first().meta.root_rank];
  auto slot = Allocate(allocate, root.input.bytes);
  if (!slot.ok()) return slot.status();
  if (*slot) Copy((*slot)->data, root.input.data, root.input.bytes);
  for (int r = 0; r < size; ++r) (*out)[r] = RankResult{*slot, ShapeOf(root.meta), {}};
  return absl::OkStatus();
}

// Rows rank `s` sends to rank `r`.
int64_t SplitOf(const TensorRequest& s, int r, int size) {
  return s.splits.empty() ? s.meta.shape[0] / size : s.splits[r];
}

absl::Status Alltoall(const ReadyTensor& t, int size, const SlotAllocator& allocate,
                      RankResults* out) {
  const Layout l = LayoutOf(t.first().meta);
  for (int r = 0; r < size; ++r) {
    RankResult result;
    result.splits.resize(size);
    int64_t rows = 0;
    for (int s = 0; s < size; ++s) rows += result.splits[s] = SplitOf(*t.ranks[s], r, size);
    auto slot = Allocate(allocate, rows * l.row);
    if (!slot.ok()) return slot.status();
    uint64_t offset = 0;
    for (int s = 0; s < size && *slot; ++s) {
      const TensorRequest& sender = *t.ranks[s];
      int64_t skip = 0;  // rows sender s sends to ranks before r
      for (int q = 0; q < r; ++q) skip += SplitOf(sender, q, size);
      const uint64_t n = result.splits[s] * l.row;
      Copy((*slot)->data + offset, sender.input.data + skip * l.row, n);
      offset += n;
    }
    result.slot = *slot;
    result.shape = {rows};
    result.shape.insert(result.shape.end(), l.rest.begin(), l.rest.end());
    (*out)[r] = std::move(result);
  }
  return absl::OkStatus();
}

absl::Status Reducescatter(const ReadyTensor& t, int size, const SlotAllocator& allocate,
                           RankResults* out) {
  const wire::Submit& m = t.first().meta;
  const Layout l = LayoutOf(m);
  const int64_t d0 = m.shape[0];
  int64_t first_row = 0;
  for (int r = 0; r < size; ++r) {
    const int64_t rows = collectives::RowsOfRank(d0, size, r);
    auto slot = Allocate(allocate, rows * l.row);
    if (!slot.ok()) return slot.status();
    if (*slot) {
      const uint64_t row_elems = l.row / l.elem;
      ReduceRange(t, size, first_row * row_elems, rows * row_elems, (*slot)->data);
    }
    std::vector<int64_t> shape = {rows};
    shape.insert(shape.end(), l.rest.begin(), l.rest.end());
    (*out)[r] = RankResult{*slot, shape, {}};
    first_row += rows;
  }
  return absl::OkStatus();
}

absl::Status RunTensor(const ReadyTensor& tensor, int size, const SlotAllocator& allocate,
                       RankResults* out, uint64_t* bytes_reduced) {
  out->assign(size, std::nullopt);
  const TensorRequest& first = tensor.first();
  *bytes_reduced += first.meta.bytes;
  switch (first.collective()) {
    case wire::Collective::kAllreduce:
      return Allreduce(tensor, size, allocate, out);
    case wire::Collective::kAllgather:
      return Allgather(tensor, size, allocate, out);
    case wire::Collective::kBroadcast:
      return Broadcast(tensor, size, allocate, out);
    case wire::Collective::kAlltoall:
      return Alltoall(tensor, size, allocate, out);
    case wire::Collective::kReducescatter:
      return Reducescatter(tensor, size, allocate, out);
    case wire::Collective::kBarrier:
    case wire::Collective::kJoin:
      return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat("unknown collective ", first.meta.collective));
}

}  // namespace

absl::Status LocalCollective::Run(const negotiation::Response& response,
                                  const SlotAllocator& allocate, std::vector<RankResults>* out,
                                  uint64_t* bytes_reduced) {
  out->resize(response.tensors.size());
  for (size_t i = 0; i < response.tensors.size(); ++i) {
    absl::Status s = RunTensor(response.tensors[i], size_, allocate, &(*out)[i], bytes_reduced);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace ard::dataplane
