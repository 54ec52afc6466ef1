// Host-level collectives of the CPU data plane over one job's TcpMesh (DESIGN.md "Data plane"):
// each daemon has already reduced its local processes' tensors; only hosts take part here, host
// index = cross rank. All hosts call the same function with the same sizes in the same order.
// Every message travels on a mesh edge (MeshPeers in algorithms.h): ring neighbours, hypercube
// partners i XOR 2^k below p (the largest power of two <= n) and fold partners i +- p.
//
// Algorithms (which allreduce runs: ChooseAllreduce and its table in algorithms.h):
// - Allreduce, recursive doubling (latency path): hosts p..n-1 first send their input to host
//   i - p, which combines it (fold); hosts 0..p-1 then exchange whole buffers with i XOR 2^k for
//   k = 0, 1, ...; the folded hosts get the result back (unfold).
// - Allreduce, ring (bandwidth path): ring reduce-scatter over n element-aligned blocks (block b
//   ends on host b), each step pipelined in AlgorithmOptions::chunk_bytes pieces, then ring
//   allgather of the reduced blocks.
// - ReduceScatterInPlace: the ring reduce-scatter over the caller's blocks. AllgatherV: the ring
//   allgather. Broadcast: a binomial tree over the hypercube (the root first hands the buffer to
//   its fold partner when it is >= p). Barrier: recursive doubling of a token. AlltoallV: a ring
//   relay (each block travels (dst - src) mod n hops; correct with O(log n) connections, not
//   bandwidth-optimal; alltoall is rare in data-parallel training).
//
// Determinism: every host ends with bit-identical results, and the same inputs give the same bits
// on every run, because each reduced element is computed once, in an order fixed by (n, count,
// algorithm) alone, and then copied: recursive doubling combines two partial results always as
// (lower hosts' op higher hosts'), i.e. the tree R(group) = R(lower half) op R(upper half) over
// leaves x_i op x_(i+p); the ring accumulates block b as x_b op (x_(b-1) op (... op x_(b+1))),
// indices mod n, on its way around the ring. (Floating-point results therefore depend on the
// algorithm and may differ in the last bits from a host-order sum.) Kernels: reduce_kernels.h.
// Average/prescale/postscale are the caller's job (kAverage reduces like kSum).
//
// Errors: InvalidArgument for inconsistent arguments (checked before any byte moves), otherwise
// the mesh's errors (tcp_mesh.h); after any transfer error the mesh is unusable and the caller
// aborts the job. Thread: the mesh's op thread. No exceptions.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "proto/local_wire.h"
#include "daemon/dataplane/tcp/algorithms.h"
#include "daemon/dataplane/tcp/tcp_mesh.h"

namespace ard::dataplane::tcp {

// buf[0, count) holds this host's input; afterwards every host holds the reduction of all inputs.
// The algorithm: ChooseAllreduce(mesh.algorithms(), ...).
absl::Status AllreduceInPlace(TcpMesh& mesh, void* buf, size_t count, wire::DataType dtype,
                              wire::ReduceOp op);
// The same with the algorithm given (kAuto chooses), for tests and benchmarks.
absl::Status AllreduceInPlace(TcpMesh& mesh, void* buf, size_t count, wire::DataType dtype,
                              wire::ReduceOp op, AllreduceAlgorithm algorithm);
// The same reading this host's input from `input` (count elements, unchanged) and leaving the
// result in `output`: the ring reduces straight from the input (the caller saves copying it into
// `output`; the result's bits are the same). input == output is the in-place form; otherwise the
// two must not overlap.
absl::Status Allreduce(TcpMesh& mesh, const void* input, void* output, size_t count,
                       wire::DataType dtype, wire::ReduceOp op,
                       AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto);

// buf holds sum(count_per_host) elements of this host's input, in blocks (host order) of
// count_per_host[h] elements (uneven or zero sizes allowed). Afterwards host `self`'s block, at
// element offset sum(count_per_host[0, self)), holds the reduction; other blocks are undefined.
absl::Status ReduceScatterInPlace(TcpMesh& mesh, void* buf,
                                  const std::vector<size_t>& count_per_host, wire::DataType dtype,
                                  wire::ReduceOp op);

// Adasum (daemon/collectives/adasum.h) of several tensors packed in buf (counts[i] elements of
// tensor i, in order; float16/32/64): afterwards every host holds, for each tensor, the Adasum
// tree over the hosts' inputs in host order, bit-identical on every host. An allgather of the
// whole buffer, then each host computes the tree itself: (n - 1) x buffer bytes arrive at every
// host (a ring allreduce moves about 2x) and (n - 1) pairs per element run on every host.
absl::Status AdasumInPlace(TcpMesh& mesh, void* buf, const std::vector<size_t>& counts,
                           wire::DataType dtype);

// buf holds blocks of bytes_per_host[h] bytes in host order; this host's block is filled in.
// Afterwards every block is filled in on every host.
absl::Status AllgatherV(TcpMesh& mesh, void* buf, const std::vector<size_t>& bytes_per_host);

// Afterwards buf[0, bytes) on every host equals the root's.
absl::Status Broadcast(TcpMesh& mesh, void* buf, size_t bytes, int root);

// send holds blocks for each destination host (send_bytes[h] bytes, host order); recv receives
// blocks from each source host (recv_bytes[h] bytes, host order). This host's own block is copied
// locally (send_bytes[self] must equal recv_bytes[self]). send and recv must not overlap.
absl::Status AlltoallV(TcpMesh& mesh, const void* send, const std::vector<size_t>& send_bytes,
                       void* recv, const std::vector<size_t>& recv_bytes);

// buf[0, bytes) holds this host's value; afterwards every host holds the combination of all
// hosts' values by `combine(mine, theirs, mine_is_lower)` (which folds theirs into mine, in
// place; `mine_is_lower`: mine is the lower hosts' partial), by recursive doubling whose fold step
// goes both ways: every host sends before it waits, so a host idle in TcpMesh::WaitReadable is
// woken by the first message of a round any other host started. The tree is recursive
// doubling's (see Determinism): a `combine` that computes (lower op higher) gives every host the
// same bits, a commutative and associative one (e.g. a bitwise AND) the same value whatever the
// tree. bytes equal on every host. The readiness rounds of the steady state (DESIGN.md "Steady
// state") use it.
absl::Status CombineInPlace(
    TcpMesh& mesh, void* buf, size_t bytes,
    const std::function<void(uint8_t* mine, const uint8_t* theirs, bool mine_is_lower)>& combine);

// Returns once every host of the mesh has entered Barrier.
absl::Status Barrier(TcpMesh& mesh);

}  // namespace ard::dataplane::tcp
