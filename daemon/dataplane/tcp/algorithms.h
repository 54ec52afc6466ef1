// Which cross-host algorithm a collective uses, and which hosts a job's data-plane mesh connects
// (DESIGN.md "Data plane"). Pure functions over value types: any thread.
//
// Connections: host i of n connects to its ring neighbours (i +- 1 mod n), to its hypercube
// partners i XOR 2^k inside the largest power of two p <= n, and to its fold partner i +- p
// (hosts p..n-1 fold into 0..n-p-1). That is O(log n) connections per host, and every algorithm
// of host_collectives.h uses only these edges.
//
// Allreduce selection table (ChooseAllreduce; "auto"), the way Open MPI's tuned collectives and
// NCCL pick by size:
//   n == 1                                   -> nothing to do
//   bytes < ring_threshold_bytes, or count < n -> recursive doubling (ceil(log2 n) + 2 rounds for
//                                               a non-power-of-two n; whole buffer each round)
//   otherwise                                -> ring reduce-scatter + ring allgather, pipelined in
//                                               chunk_bytes pieces (2 (n - 1) steps, each host
//                                               sends 2 (n - 1) / n of the buffer)
// cross_host_algorithm = ring | recursive_doubling forces one for every size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/negotiation/steady_defaults.h"

namespace ard::dataplane::tcp {

enum class AllreduceAlgorithm { kAuto, kRing, kRecursiveDoubling };

// Every host of a job must use the same options (TcpMesh::Connect checks it with its peers):
// they decide each collective's message pattern.
struct AlgorithmOptions {
  AllreduceAlgorithm allreduce = AllreduceAlgorithm::kAuto;
  // Auto: allreduces of at least this many bytes take the ring.
  size_t ring_threshold_bytes = 64 << 10;
  // The ring's reduce-scatter moves and reduces each block in pieces of this many bytes (whole
  // elements), bounding staging memory and letting the kernel's socket buffers carry one piece
  // while the previous one is reduced.
  size_t chunk_bytes = 4 << 20;
  // DaemonConfig.steady_state: idle hosts take part in readiness rounds between collectives.
  bool steady_state = negotiation::kSteadyStateDefault;
  // DaemonConfig.steady_round_data_max_bytes: which cached allreduces the rounds carry (it
  // decides the rounds' message size).
  uint64_t steady_round_data_max_bytes = negotiation::kSteadyRoundDataMaxBytesDefault;
};

// "auto", "ring", "recursive_doubling".
std::string AllreduceAlgorithmName(AllreduceAlgorithm algorithm);
// InvalidArgument naming the accepted values.
absl::StatusOr<AllreduceAlgorithm> ParseAllreduceAlgorithm(const std::string& name);

// The table above: kRing or kRecursiveDoubling for an allreduce of `count` elements of
// `element_bytes` on `n` > 1 hosts.
AllreduceAlgorithm ChooseAllreduce(const AlgorithmOptions& options, int n, size_t count,
                                   size_t element_bytes);

// A value equal on two hosts exactly when their options make the same message patterns.
uint64_t Fingerprint(const AlgorithmOptions& options);

// The largest power of two <= n (n >= 1).
int PowerOfTwoFloor(int n);

// The hosts host `self` of `n` connects to (see the header comment), ascending, without self.
// Symmetric: j is in MeshPeers(i, n) exactly when i is in MeshPeers(j, n).
std::vector<int> MeshPeers(int self, int n);

}  // namespace ard::dataplane::tcp
