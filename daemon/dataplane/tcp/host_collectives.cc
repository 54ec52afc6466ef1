#include "daemon/dataplane/tcp/host_collectives.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/collectives/adasum.h"
#include "daemon/collectives/reduce_kernels.h"
#include "daemon/common/status_macros.h"

namespace ard::dataplane::tcp {
namespace {

using wire::DataType;
using wire::ReduceOp;

// Contiguous blocks of elements, one per host, in host order.
struct Blocks {
  std::vector<size_t> offset;
  std::vector<size_t> count;
};

Blocks EvenBlocks(size_t count, int n) {
  Blocks b;
  size_t offset = 0;
  for (int h = 0; h < n; ++h) {
    const size_t c = count / n + (static_cast<size_t>(h) < count % n ? 1 : 0);
    b.offset.push_back(offset);
    b.count.push_back(c);
    offset += c;
  }
  return b;
}

Blocks BlocksOf(const std::vector<size_t>& counts) {
  Blocks b;
  b.count = counts;
  b.offset.resize(counts.size());
  std::exclusive_scan(counts.begin(), counts.end(), b.offset.begin(), size_t{0});
  return b;
}

absl::Status CheckPerHost(const TcpMesh& mesh, size_t entries, const char* what) {
  if (entries == static_cast<size_t>(mesh.size())) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("job ", mesh.job_id(), ": ", what, " has ",
                                                 entries, " entries for ", mesh.size(), " hosts"));
}

absl::Status CheckReduce(const TcpMesh& mesh, const void* buf, size_t count, DataType dtype) {
  if (!collectives::ReductionSupported(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", mesh.job_id(), ": dtype ", static_cast<uint32_t>(dtype), " cannot be reduced"));
  }
  if (buf == nullptr && count > 0) {
    return absl::InvalidArgumentError(absl::StrCat("job ", mesh.job_id(), ": null buffer"));
  }
  return absl::OkStatus();
}

// Staging slot of host h's input (every host but self has one).
size_t SlotIndex(int h, int self) { return static_cast<size_t>(h < self ? h : h - 1); }

// Reduces `count` elements of every host's input in host order into `mine` (this host's input).
// Host h's input is in staging slot SlotIndex(h) of `slot_bytes`; slot 0 may be overwritten.
void ReduceHostOrder(uint8_t* mine, uint8_t* staging, size_t slot_bytes, int self, int n,
                     size_t count, DataType dtype, ReduceOp op) {
  if (count == 0 || n == 1) return;
  auto input = [&](int h) { return staging + SlotIndex(h, self) * slot_bytes; };
  // ((x0 op x1) op x2) ...: the accumulator starts as host 0's input, wherever that is.
  uint8_t* acc = self == 0 ? mine : input(0);
  for (int h = 1; h < n; ++h) {
    collectives::ReduceInto(acc, h == self ? mine : input(h), count, dtype, op);
  }
  if (acc != mine) std::memcpy(mine, acc, count * wire::DataTypeSize(static_cast<uint32_t>(dtype)));
}

// Every host sends its whole buffer to every other host; each reduces all n in host order.
absl::Status DirectAllreduce(TcpMesh& mesh, uint8_t* buf, size_t count, DataType dtype,
                             ReduceOp op) {
  const int n = mesh.size(), self = mesh.self();
  const size_t bytes = count * wire::DataTypeSize(static_cast<uint32_t>(dtype));
  uint8_t* staging = mesh.Scratch((n - 1) * bytes);
  std::vector<TcpMesh::Send> sends;
  std::vector<TcpMesh::Recv> recvs;
  for (int k = 1; k < n; ++k) {
    const int p = (self + k) % n;
    sends.push_back({p, buf, bytes});
    recvs.push_back({p, staging + SlotIndex(p, self) * bytes, bytes});
  }
  ARD_RETURN_IF_ERROR(mesh.Transfer(sends, recvs));
  ReduceHostOrder(buf, staging, bytes, self, n, count, dtype, op);
  return absl::OkStatus();
}

size_t ChunkElements(const HostCollectiveOptions& options, int n, size_t esize) {
  size_t bytes = options.chunk_bytes;
  if (n > 1) bytes = std::min(bytes, options.max_staging_bytes / (n - 1));
  return std::max<size_t>(1, bytes / esize);
}

// Reduce-scatter over `blocks`, chunk by chunk; with `allgather`, each reduced chunk is also sent
// to every host in the next step (per connection: the allgather piece, then the scatter piece).
absl::Status ChunkedReduce(TcpMesh& mesh, uint8_t* buf, const Blocks& blocks, DataType dtype,
                           ReduceOp op, bool allgather, const HostCollectiveOptions& options) {
  const int n = mesh.size(), self = mesh.self();
  if (n == 1) return absl::OkStatus();
  const size_t esize = wire::DataTypeSize(static_cast<uint32_t>(dtype));
  const size_t chunk = ChunkElements(options, n, esize);
  size_t steps = 0;
  for (size_t c : blocks.count) steps = std::max(steps, (c + chunk - 1) / chunk);
  // Piece `step` of host b's block: {byte pointer into buf, bytes}.
  auto piece = [&](int b, size_t step) {
    const size_t begin = std::min(step * chunk, blocks.count[b]);
    const size_t end = std::min(begin + chunk, blocks.count[b]);
    return std::make_pair(buf + (blocks.offset[b] + begin) * esize, (end - begin) * esize);
  };
  uint8_t* staging = mesh.Scratch((n - 1) * chunk * esize);
  std::vector<TcpMesh::Send> sends;
  std::vector<TcpMesh::Recv> recvs;
  for (size_t step = 0; step < steps + (allgather ? 1 : 0); ++step) {
    sends.clear();
    recvs.clear();
    for (int k = 1; k < n; ++k) {
      const int p = (self + k) % n;
      if (allgather && step >= 1) {
        sends.push_back({p, piece(self, step - 1).first, piece(self, step - 1).second});
        recvs.push_back({p, piece(p, step - 1).first, piece(p, step - 1).second});
      }
      if (step < steps) {
        sends.push_back({p, piece(p, step).first, piece(p, step).second});
        recvs.push_back(
            {p, staging + SlotIndex(p, self) * chunk * esize, piece(self, step).second});
      }
    }
    ARD_RETURN_IF_ERROR(mesh.Transfer(sends, recvs));
    if (step < steps) {
      const auto [mine, bytes] = piece(self, step);
      ReduceHostOrder(mine, staging, chunk * esize, self, n, bytes / esize, dtype, op);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AllreduceInPlace(TcpMesh& mesh, void* buf, size_t count, DataType dtype, ReduceOp op,
                              const HostCollectiveOptions& options) {
  ARD_RETURN_IF_ERROR(CheckReduce(mesh, buf, count, dtype));
  const int n = mesh.size();
  if (n == 1 || count == 0) return absl::OkStatus();
  const size_t bytes = count * wire::DataTypeSize(static_cast<uint32_t>(dtype));
  uint8_t* data = static_cast<uint8_t*>(buf);
  if ((n - 1) * bytes <= options.direct_allreduce_bytes || count < static_cast<size_t>(n)) {
    return DirectAllreduce(mesh, data, count, dtype, op);
  }
  return ChunkedReduce(mesh, data, EvenBlocks(count, n), dtype, op, /*allgather=*/true, options);
}

absl::Status ReduceScatterInPlace(TcpMesh& mesh, void* buf,
                                  const std::vector<size_t>& count_per_host, DataType dtype,
                                  ReduceOp op, const HostCollectiveOptions& options) {
  ARD_RETURN_IF_ERROR(CheckPerHost(mesh, count_per_host.size(), "count_per_host"));
  const size_t total = std::accumulate(count_per_host.begin(), count_per_host.end(), size_t{0});
  ARD_RETURN_IF_ERROR(CheckReduce(mesh, buf, total, dtype));
  return ChunkedReduce(mesh, static_cast<uint8_t*>(buf), BlocksOf(count_per_host), dtype, op,
                       /*allgather=*/false, options);
}

absl::Status AllgatherV(TcpMesh& mesh, void* buf, const std::vector<size_t>& bytes_per_host) {
  ARD_RETURN_IF_ERROR(CheckPerHost(mesh, bytes_per_host.size(), "bytes_per_host"));
  const Blocks blocks = BlocksOf(bytes_per_host);
  uint8_t* data = static_cast<uint8_t*>(buf);
  const int n = mesh.size(), self = mesh.self();
  std::vector<TcpMesh::Send> sends;
  std::vector<TcpMesh::Recv> recvs;
  for (int k = 1; k < n; ++k) {
    const int p = (self + k) % n;
    sends.push_back({p, data + blocks.offset[self], blocks.count[self]});
    recvs.push_back({p, data + blocks.offset[p], blocks.count[p]});
  }
  return mesh.Transfer(sends, recvs);
}

absl::Status AdasumInPlace(TcpMesh& mesh, void* buf, const std::vector<size_t>& counts,
                           DataType dtype) {
  if (!collectives::AdasumSupported(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", mesh.job_id(), ": Adasum of dtype ", static_cast<uint32_t>(dtype)));
  }
  const size_t elem = wire::DataTypeSize(static_cast<uint32_t>(dtype));
  size_t total = 0;
  for (size_t c : counts) total += c * elem;
  const int n = mesh.size();
  if (n == 1 || total == 0) return absl::OkStatus();
  thread_local std::vector<uint8_t> gathered;
  gathered.resize(n * total);
  std::memcpy(gathered.data() + mesh.self() * total, buf, total);
  ARD_RETURN_IF_ERROR(AllgatherV(mesh, gathered.data(), std::vector<size_t>(n, total)));
  size_t offset = 0;
  std::vector<const void*> leaves(n);
  for (size_t c : counts) {
    for (int h = 0; h < n; ++h) leaves[h] = gathered.data() + h * total + offset;
    collectives::AdasumTree(leaves, c, dtype, static_cast<uint8_t*>(buf) + offset);
    offset += c * elem;
  }
  return absl::OkStatus();
}

absl::Status Broadcast(TcpMesh& mesh, void* buf, size_t bytes, int root) {
  const int n = mesh.size(), self = mesh.self();
  if (root < 0 || root >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", mesh.job_id(), ": broadcast root ", root, " of ", n, " hosts"));
  }
  if (self != root) return mesh.Exchange(-1, nullptr, 0, root, buf, bytes);
  std::vector<TcpMesh::Send> sends;
  for (int k = 1; k < n; ++k) sends.push_back({(self + k) % n, buf, bytes});
  return mesh.Transfer(sends, {});
}

absl::Status AlltoallV(TcpMesh& mesh, const void* send, const std::vector<size_t>& send_bytes,
                       void* recv, const std::vector<size_t>& recv_bytes) {
  ARD_RETURN_IF_ERROR(CheckPerHost(mesh, send_bytes.size(), "send_bytes"));
  ARD_RETURN_IF_ERROR(CheckPerHost(mesh, recv_bytes.size(), "recv_bytes"));
  const int n = mesh.size(), self = mesh.self();
  if (send_bytes[self] != recv_bytes[self]) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", mesh.job_id(), ": alltoall sends ", send_bytes[self],
                     " bytes to itself but expects ", recv_bytes[self]));
  }
  const Blocks out = BlocksOf(send_bytes), in = BlocksOf(recv_bytes);
  const uint8_t* src = static_cast<const uint8_t*>(send);
  uint8_t* dst = static_cast<uint8_t*>(recv);
  if (send_bytes[self] > 0)
    std::memcpy(dst + in.offset[self], src + out.offset[self], send_bytes[self]);
  std::vector<TcpMesh::Send> sends;
  std::vector<TcpMesh::Recv> recvs;
  for (int k = 1; k < n; ++k) {
    const int p = (self + k) % n;
    sends.push_back({p, src + out.offset[p], out.count[p]});
    recvs.push_back({p, dst + in.offset[p], in.count[p]});
  }
  return mesh.Transfer(sends, recvs);
}

absl::Status Barrier(TcpMesh& mesh) {
  const int n = mesh.size();
  const uint8_t token = 0xBA;
  std::vector<uint8_t> received(n);
  std::vector<TcpMesh::Send> sends;
  std::vector<TcpMesh::Recv> recvs;
  for (int k = 1; k < n; ++k) {
    const int p = (mesh.self() + k) % n;
    sends.push_back({p, &token, 1});
    recvs.push_back({p, &received[p], 1});
  }
  ARD_RETURN_IF_ERROR(mesh.Transfer(sends, recvs));
  for (int k = 1; k < n; ++k) {
    const int p = (mesh.self() + k) % n;
    if (received[p] != token) {
      absl::Status error = absl::InternalError(
          absl::StrCat("job ", mesh.job_id(), ": barrier byte from host ", p, " is 0x",
                       absl::Hex(received[p]), ": the hosts' collectives are out of step"));
      mesh.Abort(error);  // the byte streams are out of step: nothing later can be trusted
      return error;
    }
  }
  return absl::OkStatus();
}

}  // namespace ard::dataplane::tcp
