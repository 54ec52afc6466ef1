// Host-level collectives of the CPU data plane over one job's TcpMesh (DESIGN.md "Data plane"):
// each daemon has already reduced its local processes' tensors; only hosts take part here, host
// index = cross rank. All hosts call the same function with the same sizes in the same order.
//
// Determinism: reductions are computed, for every element, as ((x0 op x1) op x2) ... op x(n-1)
// over the hosts' inputs in host order, with the kernels of reduce_kernels.h, whatever the
// algorithm, chunking or n; so results are bit-identical on every host and across runs.
// Average/prescale/postscale are the caller's job (kAverage reduces like kSum).
//
// Algorithms: allreduce = reduce-scatter by direct exchange (each host owns one contiguous,
// element-aligned block; all hosts exchange chunks of their blocks with all others at once) then
// allgather, pipelined chunk by chunk (allgather of chunk c travels with reduce-scatter of c+1);
// small buffers skip the scatter: every host sends its whole buffer to every other one and reduces
// all n in host order (one network hop instead of two). Broadcast is a star from the root.
//
// Errors: InvalidArgument for inconsistent arguments (checked before any byte moves), otherwise
// the mesh's errors (tcp_mesh.h); after any transfer error the mesh is unusable and the caller
// aborts the job. Thread: the mesh's op thread. No exceptions.
#pragma once

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "client/local_wire.h"
#include "daemon/dataplane/tcp/tcp_mesh.h"

namespace ard::dataplane::tcp {

struct HostCollectiveOptions {
  // Reduce-scatter moves and reduces each host's block in pieces of this many bytes (rounded down
  // to whole elements), bounding staging memory to (n - 1) pieces and pipelining the phases.
  size_t chunk_bytes = 4 << 20;
  // Upper bound on the staging memory (n - 1) pieces may take; pieces shrink for large n.
  size_t max_staging_bytes = 64 << 20;
  // Allreduce sends whole buffers to every host when (n - 1) * buffer bytes is at most this.
  size_t direct_allreduce_bytes = 64 << 10;
};

// buf[0, count) holds this host's input; afterwards every host holds the reduction of all inputs.
absl::Status AllreduceInPlace(TcpMesh& mesh, void* buf, size_t count, wire::DataType dtype,
                              wire::ReduceOp op, const HostCollectiveOptions& options = {});

// buf holds sum(count_per_host) elements of this host's input, in blocks (host order) of
// count_per_host[h] elements (uneven or zero sizes allowed). Afterwards host `self`'s block, at
// element offset sum(count_per_host[0, self)), holds the reduction; other blocks are undefined.
absl::Status ReduceScatterInPlace(TcpMesh& mesh, void* buf,
                                  const std::vector<size_t>& count_per_host, wire::DataType dtype,
                                  wire::ReduceOp op, const HostCollectiveOptions& options = {});

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

// Returns once every host of the mesh has entered Barrier.
absl::Status Barrier(TcpMesh& mesh);

}  // namespace ard::dataplane::tcp
