#include "daemon/dataplane/tcp_allreduce.h"

#include <cstring>
#include <map>
#include <tuple>

#include "daemon/collectives/reduce_kernels.h"
#include "daemon/common/status_macros.h"
#include "daemon/dataplane/adasum_ranks.h"
#include "daemon/dataplane/tcp/host_collectives.h"

namespace ard::dataplane {

using negotiation::ReadyTensor;
using negotiation::Response;

// Computed in passes that stay in the L2 cache, every rank's input per pass, so that `dst` goes to
// memory once; without prescale the first two inputs are reduced straight into `dst` (no copy of
// the first).
void HostPartial(const ReadyTensor& t, const std::vector<int>& local_ranks, uint8_t* dst) {
  const wire::Submit& m = t.first().meta;
  const auto dtype = static_cast<wire::DataType>(m.dtype);
  const auto op = static_cast<wire::ReduceOp>(m.reduce_op);
  const size_t elem = wire::DataTypeSize(m.dtype);
  const uint64_t count = m.bytes / elem;
  constexpr uint64_t kPassBytes = 128 << 10;
  const uint64_t pass = std::max<uint64_t>(1, kPassBytes / elem);
  thread_local std::vector<uint8_t> scratch;
  thread_local std::vector<const uint8_t*> inputs;
  inputs.clear();
  for (int r : local_ranks) {
    if (t.ranks[r]) inputs.push_back(t.ranks[r]->input.data);
  }
  const bool scaled = m.prescale != 1.0;
  for (uint64_t begin = 0; begin < count; begin += pass) {
    const uint64_t n = std::min(pass, count - begin);
    const uint64_t at = begin * elem;
    uint8_t* out = dst + at;
    if (inputs.empty()) {
      collectives::FillIdentity(out, n, dtype, op);
      continue;
    }
    size_t next = 1;
    if (!scaled && inputs.size() >= 2) {
      collectives::ReduceOutOfPlace(out, inputs[0] + at, inputs[1] + at, n, dtype, op);
      next = 2;
    } else {
      memcpy(out, inputs[0] + at, n * elem);
      collectives::Scale(out, n, dtype, m.prescale);
    }
    for (; next < inputs.size(); ++next) {
      const uint8_t* src = inputs[next] + at;
      if (scaled) {
        scratch.assign(src, src + n * elem);
        collectives::Scale(scratch.data(), n, dtype, m.prescale);
        src = scratch.data();
      }
      collectives::ReduceInto(out, src, n, dtype, op);
    }
  }
}

void FinishReduction(const wire::Submit& m, int size, uint8_t* buf) {
  double post = m.postscale;
  if (static_cast<wire::ReduceOp>(m.reduce_op) == wire::ReduceOp::kAverage) post /= size;
  collectives::Scale(buf, m.bytes / wire::DataTypeSize(m.dtype),
                     static_cast<wire::DataType>(m.dtype), post);
}

namespace {

// Adasum of the kind's tensors (DESIGN.md "Adasum"): this host's tree over its ranks into a
// fusion buffer, the tree over hosts, then each result copied into its slot.
absl::Status AdasumKind(const Response& response, const std::vector<size_t>& members,
                        const HostLayout& job, tcp::TcpMesh& mesh, TransferSpan* transfer,
                        const SlotAllocator& allocate, std::vector<RankResults>* out) {
  thread_local std::vector<uint8_t> fusion;
  const wire::Submit& first = response.tensors[members[0]].first().meta;
  const size_t elem = wire::DataTypeSize(first.dtype);
  uint64_t total = 0;
  for (size_t i : members) total += response.tensors[i].first().meta.bytes;
  fusion.resize(total);
  std::vector<size_t> counts;
  uint64_t offset = 0;
  for (size_t i : members) {
    const ReadyTensor& t = response.tensors[i];
    AdasumOfRanks(t, job.ranks_of_host[job.cross_rank], fusion.data() + offset);
    counts.push_back(t.first().meta.bytes / elem);
    offset += t.first().meta.bytes;
  }
  transfer->Begin();
  absl::Status s =
      tcp::AdasumInPlace(mesh, fusion.data(), counts, static_cast<wire::DataType>(first.dtype));
  transfer->End();
  ARD_RETURN_IF_ERROR(s);
  offset = 0;
  for (size_t i : members) {
    const ReadyTensor& t = response.tensors[i];
    const wire::Submit& m = t.first().meta;
    FinishReduction(m, job.size, fusion.data() + offset);
    std::shared_ptr<shm::ResultSlot> slot;
    if (m.bytes > 0) {
      ARD_ASSIGN_OR_RETURN(slot, allocate(m.bytes));
      memcpy(slot->data, fusion.data() + offset, m.bytes);
    }
    offset += m.bytes;
    for (int r : job.ranks_of_host[job.cross_rank]) {
      if (t.ranks[r]) (*out)[i][r] = RankResult{slot, ShapeOf(m), {}};
    }
  }
  return absl::OkStatus();
}

// The input of this host's only rank taking part in `t` when the cross-host allreduce can read it
// as it is (no prescale), else null (HostPartial computes the host's contribution).
const uint8_t* SoleInput(const ReadyTensor& t, const HostLayout& job) {
  const uint8_t* input = nullptr;
  for (int r : job.ranks_of_host[job.cross_rank]) {
    if (!t.ranks[r]) continue;
    if (input != nullptr) return nullptr;
    input = t.ranks[r]->input.data;
  }
  return t.first().meta.prescale == 1.0 ? input : nullptr;
}

// Tensor bytes [offset, offset + bytes) of a fused result slot, as a slot of its own that keeps
// the fused one alive (it is freed once every tensor's result is released).
std::shared_ptr<shm::ResultSlot> PartOf(const std::shared_ptr<shm::ResultSlot>& fused,
                                        uint64_t offset, uint64_t bytes) {
  if (bytes == 0) return nullptr;
  if (offset == 0 && bytes == fused->bytes) return fused;
  return std::shared_ptr<shm::ResultSlot>(
      new shm::ResultSlot{fused->segment, fused->offset + offset, bytes, fused->data + offset},
      [fused](shm::ResultSlot* part) { delete part; });
}

uint64_t SlotAligned(uint64_t offset) {
  return (offset + wire::kSlotAlignment - 1) / wire::kSlotAlignment * wire::kSlotAlignment;
}

}  // namespace

// Allreduces whose data a readiness round carried (Response::reduced: their reduction over every
// host): each result finished (postscale, Average's division) in one result slot laid out as
// Allreduce lays out a kind. Nothing crosses hosts.
absl::Status WriteCarried(const Response& response, const HostLayout& job,
                          const SlotAllocator& allocate, std::vector<RankResults>* out) {
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  for (size_t i = 0; i < response.tensors.size(); ++i) {
    const uint64_t bytes = response.tensors[i].first().meta.bytes;
    if (i >= response.reduced.size() || response.reduced[i].size() != bytes) {
      return absl::InternalError(absl::StrCat("tensor ", response.tensors[i].name,
                                              ": the round carried no result of its size"));
    }
    total = SlotAligned(total);
    offsets.push_back(total);
    total += bytes;
  }
  std::shared_ptr<shm::ResultSlot> fused;
  if (total > 0) {
    ARD_ASSIGN_OR_RETURN(fused, allocate(total));
  }
  for (size_t i = 0; i < response.tensors.size(); ++i) {
    const ReadyTensor& t = response.tensors[i];
    const wire::Submit& m = t.first().meta;
    if (m.bytes > 0) {
      std::memcpy(fused->data + offsets[i], response.reduced[i].data(), m.bytes);
      FinishReduction(m, job.size, fused->data + offsets[i]);
    }
    std::shared_ptr<shm::ResultSlot> slot = PartOf(fused, offsets[i], m.bytes);
    for (int r : job.ranks_of_host[job.cross_rank]) {
      if (t.ranks[r]) (*out)[i][r] = RankResult{slot, ShapeOf(m), {}};
    }
  }
  return absl::OkStatus();
}

// Allreduce of several tensors: those of one kind (dtype, op, scales) travel through one
// cross-host collective, reduced in place in one result slot that holds them all (each at a
// kSlotAlignment offset; the few bytes between them are zeroed and reduced along, unused), so
// no result is copied. A kind of one tensor on a host with one rank taking part reduces straight
// from that rank's input: no copy at all.
absl::Status TcpAllreduce(const Response& response, const HostLayout& job, tcp::TcpMesh& mesh,
                          TransferSpan* transfer, const SlotAllocator& allocate,
                          std::vector<RankResults>* out) {
  std::map<std::tuple<uint32_t, uint32_t, double, double>, std::vector<size_t>> kinds;
  for (size_t i = 0; i < response.tensors.size(); ++i) {
    const wire::Submit& m = response.tensors[i].first().meta;
    kinds[{m.dtype, m.reduce_op, m.prescale, m.postscale}].push_back(i);
  }
  for (const auto& [kind, members] : kinds) {
    const auto dtype = static_cast<wire::DataType>(std::get<0>(kind));
    const auto op = static_cast<wire::ReduceOp>(std::get<1>(kind));
    if (op == wire::ReduceOp::kAdasum) {
      ARD_RETURN_IF_ERROR(AdasumKind(response, members, job, mesh, transfer, allocate, out));
      continue;
    }
    const size_t elem = wire::DataTypeSize(std::get<0>(kind));
    std::vector<uint64_t> offsets;
    uint64_t total = 0;
    for (size_t i : members) {
      total = SlotAligned(total);
      offsets.push_back(total);
      total += response.tensors[i].first().meta.bytes;
    }
    std::shared_ptr<shm::ResultSlot> fused;
    if (total > 0) {
      ARD_ASSIGN_OR_RETURN(fused, allocate(total));
    }
    uint8_t* data = fused != nullptr ? fused->data : nullptr;
    const uint8_t* input =
        members.size() == 1 ? SoleInput(response.tensors[members[0]], job) : nullptr;
    if (input == nullptr && data != nullptr) {
      uint64_t end = 0;
      for (size_t k = 0; k < members.size(); ++k) {
        std::memset(data + end, 0, offsets[k] - end);
        HostPartial(response.tensors[members[k]], job.ranks_of_host[job.cross_rank],
                    data + offsets[k]);
        end = offsets[k] + response.tensors[members[k]].first().meta.bytes;
      }
      input = data;
    }
    transfer->Begin();
    absl::Status s = tcp::Allreduce(mesh, input, data, total / elem, dtype, op);
    transfer->End();
    ARD_RETURN_IF_ERROR(s);
    for (size_t k = 0; k < members.size(); ++k) {
      const ReadyTensor& t = response.tensors[members[k]];
      const wire::Submit& m = t.first().meta;
      if (m.bytes > 0) FinishReduction(m, job.size, data + offsets[k]);
      std::shared_ptr<shm::ResultSlot> slot = PartOf(fused, offsets[k], m.bytes);
      for (int r : job.ranks_of_host[job.cross_rank]) {
        if (t.ranks[r]) (*out)[members[k]][r] = RankResult{slot, ShapeOf(m), {}};
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ard::dataplane
