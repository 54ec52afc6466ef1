#include "daemon/dataplane/tcp_collective.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/collectives/row_split.h"
#include "daemon/common/logging.h"
#include "daemon/dataplane/tcp/host_collectives.h"
#include "daemon/dataplane/tcp_allreduce.h"

namespace ard::dataplane {
namespace {

using negotiation::ReadyTensor;
using negotiation::Response;
using negotiation::TensorRequest;

void Copy(uint8_t* dst, const uint8_t* src, uint64_t n) {
  if (n > 0) memcpy(dst, src, n);
}

uint64_t RowBytes(const wire::Submit& m) {
  uint64_t n = wire::DataTypeSize(m.dtype);
  for (uint32_t d = 1; d < m.ndims; ++d) n *= m.shape[d];
  return n;
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
  FinishReduction(m, job.size, full.data());
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
    return TcpAllreduce(response, job, mesh, transfer, allocate, out);
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
