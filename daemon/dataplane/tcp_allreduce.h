// The allreduce of a cross-host job (TcpCollective, tcp_collective.h): this host's partial from
// its ranks' inputs, the reduction across hosts over the job's TCP mesh, and the results written
// into the job's result arena; and the results of allreduces a steady-state round already carried.
// Adasum kinds go through adasum_ranks.h and the host tree. Thread: the job's executor thread.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "daemon/dataplane/collective.h"
#include "daemon/dataplane/host_layout.h"
#include "daemon/dataplane/tcp/tcp_mesh.h"
#include "daemon/negotiation/tensor_request.h"

namespace ard::dataplane {

// This host's contribution to an allreduce of `t`: the reduction of its present ranks (of
// `local_ranks`, ascending) in rank order, each input prescaled; the identity when none of them
// takes part. t's bytes are written to `dst`. The steady state's carried rounds use it too, so a
// carried tensor's partial is the one the allreduce would send.
void HostPartial(const negotiation::ReadyTensor& t, const std::vector<int>& local_ranks,
                 uint8_t* dst);

// A reduction's last step, in place on its `m.bytes` in `buf`: the postscale, and Average's
// division by the job's `size`.
void FinishReduction(const wire::Submit& m, int size, uint8_t* buf);

// Allreduces `response`'s tensors (one fusion per kind: dtype, op, scales), filling `out` (one
// RankResults per tensor, sized by the caller) for this host's ranks; `transfer` spans the
// cross-host part.
absl::Status TcpAllreduce(const negotiation::Response& response, const HostLayout& job,
                          tcp::TcpMesh& mesh, TransferSpan* transfer, const SlotAllocator& allocate,
                          std::vector<RankResults>* out);

// Writes the results of allreduces whose reduction a readiness round carried
// (Response::reduced); nothing crosses hosts.
absl::Status WriteCarried(const negotiation::Response& response, const HostLayout& job,
                          const SlotAllocator& allocate, std::vector<RankResults>* out);

}  // namespace ard::dataplane
