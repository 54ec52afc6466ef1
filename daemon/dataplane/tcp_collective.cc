#include "daemon/dataplane/tcp_collective.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/collectives/reduce_kernels.h"
#include "daemon/collectives/row_split.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
#include "daemon/dataplane/adasum_ranks.h"
#include "daemon/dataplane/tcp/host_collectives.h"

namespace ard::dataplane {
namespace {

using negotiation::ReadyTensor;
using negotiation::Response;
using negotiation::TensorRequest;

void Copy(uint8_t* dst, const uint8_t* src, uint64_t n) {
  if (n > 0) memcpy(dst, src, n);
}

std::vector<int64_t> ShapeOf(const wire::Submit& m) {
  return std::vector<int64_t>(m.shape, m.shape + m.ndims);
}

uint64_t RowBytes(const wire::Submit& m) {
  uint64_t n = wire::DataTypeSize(m.dtype);
  for (uint32_t d = 1; d < m.ndims; ++d) n *= m.shape[d];
  return n;
}

}  // namespace

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

namespace {

void Finish(const wire::Submit& m, int size, uint8_t* buf) {
  double post = m.postscale;
  if (static_cast<wire::ReduceOp>(m.reduce_op) == wire::ReduceOp::kAverage) post /= size;
  collectives::Scale(buf, m.bytes / wire::DataTypeSize(m.dtype),
                     static_cast<wire::DataType>(m.dtype), post);
}

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
    Finish(m, job.size, fusion.data() + offset);
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
      Finish(m, job.size, fused->data + offsets[i]);
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
absl::Status Allreduce(const Response& response, const HostLayout& job, tcp::TcpMesh& mesh,
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
      if (m.bytes > 0) Finish(m, job.size, data + offsets[k]);
      std::shared_ptr<shm::ResultSlot> slot = PartOf(fused, offsets[k], m.bytes);
      for (int r : job.ranks_of_host[job.cross_rank]) {
        if (t.ranks[r]) (*out)[members[k]][r] = RankResult{slot, ShapeOf(m), {}};
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<shm::ResultSlot>> Slot(const SlotAllocator& allocate,
                                                      uint64_t bytes) {
  if (bytes == 0) return std::shared_ptr<shm::ResultSlot>();
  return allocate(bytes);
}

absl::Status Allgather(const ReadyTensor& t, const HostLayout& job, tcp::TcpMesh& mesh,
                       const SlotAllocator& allocate, RankResults* out) {
  const wire::Submit& m = t.first().meta;
  const uint64_t row = RowBytes(m);
  std::vector<int64_t> rows(job.size);
  int64_t total_rows = 0;
  for (int r = 0; r < job.size; ++r) total_rows += rows[r] = t.ranks[r]->meta.shape[0];
  // Host blocks (host order), each the concatenation of its ranks' tensors (rank order).
  std::vector<size_t> host_bytes(job.cross_size, 0);
  for (int r = 0; r < job.size; ++r) host_bytes[job.host_of_rank[r]] += rows[r] * row;
  std::vector<size_t> host_offset(job.cross_size, 0);
  for (int h = 1; h < job.cross_size; ++h) host_offset[h] = host_offset[h - 1] + host_bytes[h - 1];
  thread_local std::vector<uint8_t> gathered;
  gathered.resize(total_rows * row);
  uint64_t at = host_offset[job.cross_rank];
  for (int r : job.ranks_of_host[job.cross_rank]) {
    Copy(gathered.data() + at, t.ranks[r]->input.data, rows[r] * row);
    at += rows[r] * row;
  }
  if (auto s = tcp::AllgatherV(mesh, gathered.data(), host_bytes); !s.ok()) return s;
  auto slot = Slot(allocate, total_rows * row);
  if (!slot.ok()) return slot.status();
  // Reorder host blocks into rank order.
  std::vector<uint64_t> cursor = host_offset;
  uint64_t dst = 0;
  for (int r = 0; r < job.size; ++r) {
    const int h = job.host_of_rank[r];
    if (*slot) Copy((*slot)->data + dst, gathered.data() + cursor[h], rows[r] * row);
    cursor[h] += rows[r] * row;
    dst += rows[r] * row;
  }
  std::vector<int64_t> shape = ShapeOf(m);
  shape[0] = total_rows;
  for (int r : job.ranks_of_host[job.cross_rank]) (*out)[r] = RankResult{*slot, shape, rows};
  return absl::OkStatus();
}

absl::Status Broadcast(const ReadyTensor& t, const HostLayout& job, tcp::TcpMesh& mesh,
                       const SlotAllocator& allocate, RankResults* out) {
  const wire::Submit& m = t.first().meta;
  const int root = m.root_rank;
  auto slot = Slot(allocate, m.bytes);
  if (!slot.ok()) return slot.status();
  if (*slot) {
    if (job.host_of_rank[root] == job.cross_rank) {
      Copy((*slot)->data, t.ranks[root]->input.data, m.bytes);
    }
    if (auto s = tcp::Broadcast(mesh, (*slot)->data, m.bytes, job.host_of_rank[root]); !s.ok()) {
      return s;
    }
  }
  for (int r : job.ranks_of_host[job.cross_rank]) (*out)[r] = RankResult{*slot, ShapeOf(m), {}};
  return absl::OkStatus();
}

int64_t SplitOf(const TensorRequest& s, int r, int size) {
  return s.splits.empty() ? s.meta.shape[0] / size : s.splits[r];
}

absl::Status Alltoall(const ReadyTensor& t, const HostLayout& job, tcp::TcpMesh& mesh,
                      const SlotAllocator& allocate, RankResults* out) {
  const int n = job.size;
  const uint64_t row = RowBytes(t.first().meta);
  const std::vector<int>& mine = job.ranks_of_host[job.cross_rank];
  // Row offset of chunk (s -> r) inside sender s's input.
  auto chunk_start = [&](int s, int r) {
    int64_t rows = 0;
    for (int q = 0; q < r; ++q) rows += SplitOf(*t.ranks[s], q, n);
    return rows;
  };
  // Send block to host h: for my senders s (rank order), for h's ranks r (rank order): chunk.
  std::vector<size_t> send_bytes(job.cross_size, 0), recv_bytes(job.cross_size, 0);
  for (int h = 0; h < job.cross_size; ++h) {
    for (int s : mine) {
      for (int r : job.ranks_of_host[h]) send_bytes[h] += SplitOf(*t.ranks[s], r, n) * row;
    }
    for (int s : job.ranks_of_host[h]) {
      for (int r : mine) recv_bytes[h] += SplitOf(*t.ranks[s], r, n) * row;
    }
  }
  thread_local std::vector<uint8_t> send, recv;
  uint64_t total_send = 0, total_recv = 0;
  for (int h = 0; h < job.cross_size; ++h) total_send += send_bytes[h], total_recv += recv_bytes[h];
  send.resize(total_send);
  recv.resize(total_recv);
  uint64_t at = 0;
  for (int h = 0; h < job.cross_size; ++h) {
    for (int s : mine) {
      for (int r : job.ranks_of_host[h]) {
        const uint64_t bytes = SplitOf(*t.ranks[s], r, n) * row;
        Copy(send.data() + at, t.ranks[s]->input.data + chunk_start(s, r) * row, bytes);
        at += bytes;
      }
    }
  }
  if (auto s = tcp::AlltoallV(mesh, send.data(), send_bytes, recv.data(), recv_bytes); !s.ok()) {
    return s;
  }
  // Where chunk (s -> r) landed in `recv`.
  std::map<std::pair<int, int>, uint64_t> landed;
  at = 0;
  for (int h = 0; h < job.cross_size; ++h) {
    for (int s : job.ranks_of_host[h]) {
      for (int r : mine) {
        landed[{s, r}] = at;
        at += SplitOf(*t.ranks[s], r, n) * row;
      }
    }
  }
  for (int r : mine) {
    RankResult result;
    int64_t rows = 0;
    for (int s = 0; s < n; ++s) rows += SplitOf(*t.ranks[s], r, n);
    auto slot = Slot(allocate, rows * row);
    if (!slot.ok()) return slot.status();
    uint64_t dst = 0;
    for (int s = 0; s < n; ++s) {
      const uint64_t bytes = SplitOf(*t.ranks[s], r, n) * row;
      if (*slot) Copy((*slot)->data + dst, recv.data() + landed[{s, r}], bytes);
      dst += bytes;
      result.splits.push_back(SplitOf(*t.ranks[s], r, n));
    }
    result.slot = *slot;
    result.shape = ShapeOf(t.first().meta);
    result.shape[0] = rows;
    (*out)[r] = std::move(result);
  }
  return absl::OkStatus();
}

// Reduces the whole tensor across hosts, then gives each local rank its rows (the first d0 % size
// ranks get one row more, like Horovod). Moves the whole tensor rather than each host's rows:
// simple, and correct for any placement of ranks on hosts.
absl::Status Reducescatter(const ReadyTensor& t, const HostLayout& job, tcp::TcpMesh& mesh,
                           const SlotAllocator& allocate, RankResults* out) {
  const wire::Submit& m = t.first().meta;
  thread_local std::vector<uint8_t> full;
  full.resize(m.bytes);
  HostPartial(t, job.ranks_of_host[job.cross_rank], full.data());
  if (auto s = tcp::AllreduceInPlace(mesh, full.data(), m.bytes / wire::DataTypeSize(m.dtype),
                                     static_cast<wire::DataType>(m.dtype),
                                     static_cast<wire::ReduceOp>(m.reduce_op));
      !s.ok()) {
    return s;
  }
  Finish(m, job.size, full.data());
  const uint64_t row = RowBytes(m);
  const int64_t d0 = m.shape[0];
  int64_t first = 0;
  for (int r = 0; r < job.size; ++r) {
    const int64_t rows = collectives::RowsOfRank(d0, job.size, r);
    if (job.host_of_rank[r] == job.cross_rank && t.ranks[r]) {
      auto slot = Slot(allocate, rows * row);
      if (!slot.ok()) return slot.status();
      if (*slot) Copy((*slot)->data, full.data() + first * row, rows * row);
      std::vector<int64_t> shape = ShapeOf(m);
      shape[0] = rows;
      (*out)[r] = RankResult{*slot, shape, {}};
    }
    first += rows;
  }
  return absl::OkStatus();
}

absl::Status RunResponse(const Response& response, const HostLayout& job, tcp::TcpMesh& mesh,
                         TransferSpan* transfer, const SlotAllocator& allocate,
                         std::vector<RankResults>* out, uint64_t* bytes_reduced) {
  out->assign(response.tensors.size(), RankResults(job.size));
  for (const auto& t : response.tensors) *bytes_reduced += t.first().meta.bytes;
  if (!response.reduced.empty()) return WriteCarried(response, job, allocate, out);
  if (response.collective == wire::Collective::kAllreduce) {
    return Allreduce(response, job, mesh, transfer, allocate, out);
  }
  // Other collectives (grouped ones included) run tensor by tensor, in list order.
  for (size_t i = 0; i < response.tensors.size(); ++i) {
    const ReadyTensor& t = response.tensors[i];
    RankResults* results = &(*out)[i];
    absl::Status s;
    // These exchange each tensor whole: the transfer spans them (their local parts are copies).
    transfer->Begin();
    switch (response.collective) {
      case wire::Collective::kAllgather:
        s = Allgather(t, job, mesh, allocate, results);
        break;
      case wire::Collective::kBroadcast:
        s = Broadcast(t, job, mesh, allocate, results);
        break;
      case wire::Collective::kAlltoall:
        s = Alltoall(t, job, mesh, allocate, results);
        break;
      case wire::Collective::kReducescatter:
        s = Reducescatter(t, job, mesh, allocate, results);
        break;
      case wire::Collective::kBarrier:
      case wire::Collective::kJoin:
        break;  // negotiation itself brought every rank here
      default:
        s = absl::InternalError(absl::StrCat("unknown collective ", response.collective));
    }
    transfer->End();
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

TcpCollective::TcpCollective(HostLayout layout, Connect connect)
    : layout_(std::move(layout)), connect_(std::move(connect)) {}

absl::Status TcpCollective::Prepare() {
  auto mesh = connect_();
  if (!mesh.ok()) {
    return absl::UnavailableError(
        absl::StrCat("data plane of job ", layout_.job, ": ", mesh.status().message()));
  }
  absl::MutexLock lock(&mu_);
  mesh_ = *std::move(mesh);
  if (!aborted_.ok()) mesh_->Abort(aborted_);  // the job failed while we connected
  mesh_for_ops_ = mesh_.get();
  Logger("dataplane")
      ->info("data plane connected job={} hosts={} cross_rank={}", layout_.job, layout_.cross_size,
             layout_.cross_rank);
  return absl::OkStatus();
}

absl::Status TcpCollective::Run(const Response& response, const SlotAllocator& allocate,
                                std::vector<RankResults>* out, uint64_t* bytes_reduced) {
  if (mesh_for_ops_ == nullptr) return absl::FailedPreconditionError("data plane not connected");
  transfer_ = TransferSpan();
  return RunResponse(response, layout_, *mesh_for_ops_, &transfer_, allocate, out, bytes_reduced);
}

absl::Status TcpCollective::JobFailure(const absl::Status& error) const {
  std::vector<std::string> hosts;
  for (size_t h = 0; h < layout_.host_names.size(); ++h) {
    hosts.push_back(absl::StrCat(h, "=", layout_.host_names[h]));
  }
  return absl::UnavailableError(absl::StrCat("data plane of job ", layout_.job,
                                             " failed: ", error.message(), " (hosts ",
                                             absl::StrJoin(hosts, ", "), ")"));
}

void TcpCollective::Abort(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (aborted_.ok()) aborted_ = why.ok() ? absl::CancelledError("job ended") : why;
  if (mesh_ != nullptr) mesh_->Abort(aborted_);
}

gpu::CrossHostReduce TcpCollective::HostAllreduce() {
  return [this](void* buf, size_t count, wire::DataType dtype, wire::ReduceOp op) {
    if (mesh_for_ops_ == nullptr) {
      return absl::UnavailableError("the job's data plane is not connected");
    }
    return tcp::AllreduceInPlace(*mesh_for_ops_, buf, count, dtype, op);
  };
}

}  // namespace ard::dataplane
