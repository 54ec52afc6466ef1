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

size_t SizeOf(DataType dtype) { return wire::DataTypeSize(static_cast<uint32_t>(dtype)); }

// Contiguous blocks, one per host, in host order (elements or bytes, as the caller uses them).
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

int Right(const TcpMesh& mesh) { return (mesh.self() + 1) % mesh.size(); }
int Left(const TcpMesh& mesh) { return (mesh.self() + mesh.size() - 1) % mesh.size(); }

// Recursive doubling of `bytes` bytes (see the header): combine(mine, theirs, mine_is_lower)
// merges the partner's buffer `theirs` into `mine`, lower hosts' operand first.
template <typename Combine>
absl::Status RecursiveDoubling(TcpMesh& mesh, uint8_t* buf, size_t bytes, uint8_t* staging,
                               const Combine& combine) {
  const int n = mesh.size(), self = mesh.self(), p = PowerOfTwoFloor(n);
  if (self >= p) {  // folded: hand the input to self - p, get the result back
    ARD_RETURN_IF_ERROR(mesh.Exchange(self - p, buf, bytes, -1, nullptr, 0));
    return mesh.Exchange(-1, nullptr, 0, self - p, buf, bytes);
  }
  const bool has_folded = self + p < n;
  if (has_folded) {
    ARD_RETURN_IF_ERROR(mesh.Exchange(-1, nullptr, 0, self + p, staging, bytes));
    ARD_RETURN_IF_ERROR(combine(buf, staging, /*mine_is_lower=*/true));
  }
  for (int bit = 1; bit < p; bit *= 2) {
    const int partner = self ^ bit;
    ARD_RETURN_IF_ERROR(mesh.Exchange(partner, buf, bytes, partner, staging, bytes));
    ARD_RETURN_IF_ERROR(combine(buf, staging, self < partner));
  }
  if (has_folded) return mesh.Exchange(self + p, buf, bytes, -1, nullptr, 0);
  return absl::OkStatus();
}

absl::Status RecursiveDoublingAllreduce(TcpMesh& mesh, uint8_t* buf, size_t count, DataType dtype,
                                        ReduceOp op) {
  const size_t bytes = count * SizeOf(dtype);
  return RecursiveDoubling(mesh, buf, bytes, mesh.Scratch(bytes),
                           [&](uint8_t* mine, uint8_t* theirs, bool lower) {
                             if (lower) {
                               collectives::ReduceInto(mine, theirs, count, dtype, op);
                             } else {  // theirs op mine, computed in the staging buffer
                               collectives::ReduceInto(theirs, mine, count, dtype, op);
                               std::memcpy(mine, theirs, bytes);
                             }
                             return absl::OkStatus();
                           });
}

// Ring reduce-scatter over element `blocks`: at step s = 0..n-2 host i sends its partial of block
// (i - 1 - s) to the right and reduces block (i - 2 - s) from the left with its own input (mine
// op partial) into `out`, in pieces of `chunk` elements; afterwards block i of `out` on host i is
// fully reduced. `in` is read only: each block is reduced from it once (at s = 0 the block sent is
// the input itself, later ones were reduced into `out` the step before), so in != out saves the
// caller a copy. Blocks of `out` other than the reduced ones are left as they were.
absl::Status RingReduceScatter(TcpMesh& mesh, const uint8_t* in, uint8_t* out, const Blocks& blocks,
                               DataType dtype, ReduceOp op) {
  const int n = mesh.size(), self = mesh.self();
  if (n == 1) return absl::OkStatus();
  const size_t esize = SizeOf(dtype);
  const size_t chunk = std::max<size_t>(1, mesh.algorithms().chunk_bytes / esize);
  const size_t largest = *std::max_element(blocks.count.begin(), blocks.count.end());
  uint8_t* staging = mesh.Scratch(std::min(chunk, largest) * esize);
  for (int s = 0; s + 1 < n; ++s) {
    const int send_b = (self - 1 - s + 2 * n) % n, recv_b = (self - 2 - s + 2 * n) % n;
    const uint8_t* send_from = s == 0 ? in : out;
    const size_t pieces =
        (std::max(blocks.count[send_b], blocks.count[recv_b]) + chunk - 1) / chunk;
    for (size_t k = 0; k < pieces; ++k) {
      const size_t send_begin = std::min(k * chunk, blocks.count[send_b]);
      const size_t send_count = std::min(chunk, blocks.count[send_b] - send_begin);
      const size_t recv_begin = std::min(k * chunk, blocks.count[recv_b]);
      const size_t recv_count = std::min(chunk, blocks.count[recv_b] - recv_begin);
      ARD_RETURN_IF_ERROR(
          mesh.Exchange(Right(mesh), send_from + (blocks.offset[send_b] + send_begin) * esize,
                        send_count * esize, Left(mesh), staging, recv_count * esize));
      const size_t at = (blocks.offset[recv_b] + recv_begin) * esize;
      collectives::ReduceOutOfPlace(out + at, in + at, staging, recv_count, dtype, op);
    }
  }
  return absl::OkStatus();
}

// Ring allgather over byte `blocks`: at step s host i sends block (i - s) to the right and
// receives block (i - s - 1) from the left, in place.
absl::Status RingAllgather(TcpMesh& mesh, uint8_t* buf, const Blocks& blocks) {
  const int n = mesh.size(), self = mesh.self();
  for (int s = 0; s + 1 < n; ++s) {
    const int send_b = (self - s + n) % n, recv_b = (self - s - 1 + n) % n;
    ARD_RETURN_IF_ERROR(mesh.Exchange(Right(mesh), buf + blocks.offset[send_b],
                                      blocks.count[send_b], Left(mesh), buf + blocks.offset[recv_b],
                                      blocks.count[recv_b]));
  }
  return absl::OkStatus();
}

absl::Status RingAllreduce(TcpMesh& mesh, const uint8_t* in, uint8_t* out, size_t count,
                           DataType dtype, ReduceOp op) {
  const Blocks elements = EvenBlocks(count, mesh.size());
  ARD_RETURN_IF_ERROR(RingReduceScatter(mesh, in, out, elements, dtype, op));
  Blocks bytes = elements;
  for (size_t& v : bytes.offset) v *= SizeOf(dtype);
  for (size_t& v : bytes.count) v *= SizeOf(dtype);
  return RingAllgather(mesh, out, bytes);
}

}  // namespace

absl::Status AllreduceInPlace(TcpMesh& mesh, void* buf, size_t count, DataType dtype, ReduceOp op) {
  return Allreduce(mesh, buf, buf, count, dtype, op, AllreduceAlgorithm::kAuto);
}

absl::Status AllreduceInPlace(TcpMesh& mesh, void* buf, size_t count, DataType dtype, ReduceOp op,
                              AllreduceAlgorithm algorithm) {
  return Allreduce(mesh, buf, buf, count, dtype, op, algorithm);
}

absl::Status Allreduce(TcpMesh& mesh, const void* input, void* output, size_t count, DataType dtype,
                       ReduceOp op, AllreduceAlgorithm algorithm) {
  ARD_RETURN_IF_ERROR(CheckReduce(mesh, output, count, dtype));
  if (input == nullptr && count > 0) {
    return absl::InvalidArgumentError(absl::StrCat("job ", mesh.job_id(), ": null input"));
  }
  const int n = mesh.size();
  const uint8_t* in = static_cast<const uint8_t*>(input);
  uint8_t* out = static_cast<uint8_t*>(output);
  if (algorithm == AllreduceAlgorithm::kAuto && n > 1 && count > 0) {
    algorithm = ChooseAllreduce(mesh.algorithms(), n, count, SizeOf(dtype));
  }
  if (n > 1 && count > 0 && algorithm == AllreduceAlgorithm::kRing) {
    return RingAllreduce(mesh, in, out, count, dtype, op);
  }
  if (in != out && count > 0) std::memcpy(out, in, count * SizeOf(dtype));
  if (n == 1 || count == 0) return absl::OkStatus();
  return RecursiveDoublingAllreduce(mesh, out, count, dtype, op);
}

absl::Status ReduceScatterInPlace(TcpMesh& mesh, void* buf,
                                  const std::vector<size_t>& count_per_host, DataType dtype,
                                  ReduceOp op) {
  ARD_RETURN_IF_ERROR(CheckPerHost(mesh, count_per_host.size(), "count_per_host"));
  const size_t total = std::accumulate(count_per_host.begin(), count_per_host.end(), size_t{0});
  ARD_RETURN_IF_ERROR(CheckReduce(mesh, buf, total, dtype));
  uint8_t* data = static_cast<uint8_t*>(buf);
  return RingReduceScatter(mesh, data, data, BlocksOf(count_per_host), dtype, op);
}

absl::Status AllgatherV(TcpMesh& mesh, void* buf, const std::vector<size_t>& bytes_per_host) {
  ARD_RETURN_IF_ERROR(CheckPerHost(mesh, bytes_per_host.size(), "bytes_per_host"));
  return RingAllgather(mesh, static_cast<uint8_t*>(buf), BlocksOf(bytes_per_host));
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
  const int n = mesh.size(), self = mesh.self(), p = PowerOfTwoFloor(n);
  if (root < 0 || root >= n) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", mesh.job_id(), ": broadcast root ", root, " of ", n, " hosts"));
  }
  // A root among the folded hosts first hands the buffer to its fold partner, the tree's root.
  const int tree_root = root >= p ? root - p : root;
  if (root >= p && self == root)
    ARD_RETURN_IF_ERROR(mesh.Exchange(tree_root, buf, bytes, -1, nullptr, 0));
  if (root >= p && self == tree_root) {
    ARD_RETURN_IF_ERROR(mesh.Exchange(-1, nullptr, 0, root, buf, bytes));
  }
  if (self < p) {
    // Binomial tree over v = self XOR tree_root: v receives from v XOR lowbit(v), then sends to
    // v XOR m for every m below that bit (the root: below p).
    const int v = self ^ tree_root;
    int mask = p;
    if (v != 0) {
      mask = v & -v;
      ARD_RETURN_IF_ERROR(mesh.Exchange(-1, nullptr, 0, self ^ mask, buf, bytes));
    }
    for (int m = mask / 2; m >= 1; m /= 2) {
      ARD_RETURN_IF_ERROR(mesh.Exchange(self ^ m, buf, bytes, -1, nullptr, 0));
    }
    if (self + p < n && self + p != root) {
      ARD_RETURN_IF_ERROR(mesh.Exchange(self + p, buf, bytes, -1, nullptr, 0));
    }
  } else if (self != root) {
    ARD_RETURN_IF_ERROR(mesh.Exchange(-1, nullptr, 0, self - p, buf, bytes));
  }
  return absl::OkStatus();
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
  if (send_bytes[self] > 0) {
    std::memcpy(dst + in.offset[self], src + out.offset[self], send_bytes[self]);
  }
  // Ring relay: at step s = 1..n-1 host i sends right a bundle of the n - s blocks that origin
  // i - s + 1 has for hosts i + 1, i + 2, ... (at s = 1 its own), preceded by their sizes (relays
  // do not know them), and receives the bundle of origin i - s, whose first block is its own.
  std::vector<uint64_t> out_sizes, in_sizes;
  std::vector<uint8_t> forward, received;
  for (int d = 1; d < n; ++d) out_sizes.push_back(send_bytes[(self + d) % n]);
  for (int s = 1; s < n; ++s) {
    const int origin = (self - s + n) % n;
    in_sizes.assign(n - s, 0);
    ARD_RETURN_IF_ERROR(mesh.Exchange(Right(mesh), out_sizes.data(), out_sizes.size() * 8,
                                      Left(mesh), in_sizes.data(), in_sizes.size() * 8));
    if (in_sizes[0] != recv_bytes[origin]) {
      absl::Status error = absl::InternalError(absl::StrCat(
          "job ", mesh.job_id(), ": alltoall block from host ", origin, " to host ", self, " has ",
          in_sizes[0], " bytes, expected ", recv_bytes[origin], ": the hosts disagree on sizes"));
      mesh.Abort(error);  // the byte streams are out of step
      return error;
    }
    received.resize(std::accumulate(in_sizes.begin() + 1, in_sizes.end(), size_t{0}));
    std::vector<TcpMesh::Send> sends;
    if (s == 1) {  // own blocks for self+1..n-1, then 0..self-1: two contiguous ranges
      const size_t end = out.offset.back() + out.count.back();
      sends.push_back({Right(mesh), src + out.offset[self] + send_bytes[self],
                       end - out.offset[self] - send_bytes[self]});
      sends.push_back({Right(mesh), src, out.offset[self]});
    } else {
      sends.push_back({Right(mesh), forward.data(), forward.size()});
    }
    const TcpMesh::Recv recvs[] = {{Left(mesh), dst + in.offset[origin], in_sizes[0]},
                                   {Left(mesh), received.data(), received.size()}};
    ARD_RETURN_IF_ERROR(mesh.Transfer(sends, recvs));
    forward.swap(received);
    out_sizes.assign(in_sizes.begin() + 1, in_sizes.end());
  }
  return absl::OkStatus();
}

absl::Status CombineInPlace(
    TcpMesh& mesh, void* buf, size_t bytes,
    const std::function<void(uint8_t* mine, const uint8_t* theirs, bool mine_is_lower)>& combine) {
  const int n = mesh.size(), self = mesh.self(), p = PowerOfTwoFloor(n);
  if (n == 1 || bytes == 0) return absl::OkStatus();
  uint8_t* mine = static_cast<uint8_t*>(buf);
  uint8_t* theirs = mesh.Scratch(bytes);
  // Unlike RecursiveDoubling, the fold is an exchange both ways: every host sends before it
  // waits, so a round one host starts reaches (wakes) every idle host of the mesh.
  if (self >= p) {
    ARD_RETURN_IF_ERROR(mesh.Exchange(self - p, mine, bytes, self - p, theirs, bytes));
    return mesh.Exchange(-1, nullptr, 0, self - p, mine, bytes);
  }
  const bool has_folded = self + p < n;
  if (has_folded) {
    ARD_RETURN_IF_ERROR(mesh.Exchange(self + p, mine, bytes, self + p, theirs, bytes));
    combine(mine, theirs, /*mine_is_lower=*/true);
  }
  for (int bit = 1; bit < p; bit *= 2) {
    ARD_RETURN_IF_ERROR(mesh.Exchange(self ^ bit, mine, bytes, self ^ bit, theirs, bytes));
    combine(mine, theirs, self < (self ^ bit));
  }
  if (has_folded) return mesh.Exchange(self + p, mine, bytes, -1, nullptr, 0);
  return absl::OkStatus();
}

absl::Status Barrier(TcpMesh& mesh) {
  constexpr uint8_t kToken = 0xBA;
  uint8_t token[2] = {kToken, 0};  // [0]: sent (and, on folded hosts, received back), [1]: staging
  auto out_of_step = [&](uint8_t byte) {
    absl::Status error = absl::InternalError(
        absl::StrCat("job ", mesh.job_id(), ": barrier byte 0x", absl::Hex(byte), " on host ",
                     mesh.self(), ": the hosts' collectives are out of step"));
    mesh.Abort(error);  // the byte streams are out of step: nothing later can be trusted
    return error;
  };
  ARD_RETURN_IF_ERROR(
      RecursiveDoubling(mesh, &token[0], 1, &token[1], [&](uint8_t*, uint8_t* theirs, bool) {
        return *theirs == kToken ? absl::OkStatus() : out_of_step(*theirs);
      }));
  return token[0] == kToken ? absl::OkStatus() : out_of_step(token[0]);
}

}  // namespace ard::dataplane::tcp
