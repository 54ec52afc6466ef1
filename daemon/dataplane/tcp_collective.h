// The data of every collective for a job whose ranks live on several hosts (DESIGN.md "Data
// plane"): each host first reduces (or gathers) its own ranks' inputs from shared memory, then
// only hosts exchange data over the job's TCP mesh (daemon/dataplane/tcp), and each host writes
// its ranks' results into the job's result arena. Allreduces (tcp_allreduce.h) of one kind in a
// response travel in one fusion buffer; allreduces whose data a steady-state round carried
// (Response::reduced) only get their results written; the other collectives are here. Reductions
// are deterministic: ranks in rank order within a host, then the hosts' partial results in the
// fixed order of the cross-host algorithm (host_collectives.h), so every rank reads bit-identical
// results (Adasum: a tree over the host's ranks, then a tree over the hosts' results, DESIGN.md
// "Adasum").
//
// Any error leaves the mesh unusable: the job fails on every host (JobFailure). Prepare connects
// the mesh (waiting for every host of the job); Abort shuts its sockets. Thread: see collective.h.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/dataplane/collective.h"
#include "daemon/dataplane/host_layout.h"
#include "daemon/dataplane/tcp/tcp_mesh.h"
#include "daemon/dataplane/tcp_allreduce.h"  // HostPartial, for the steady state
#include "daemon/gpu/gpu_job.h"

namespace ard::dataplane {

class TcpCollective : public Collective {
 public:
  using Connect = std::function<absl::StatusOr<std::unique_ptr<tcp::TcpMesh>>()>;
  TcpCollective(HostLayout layout, Connect connect);

  absl::Status Prepare() override;
  absl::Status Run(const negotiation::Response& response, const SlotAllocator& allocate,
                   std::vector<RankResults>* out, uint64_t* bytes_reduced) override;
  absl::Status JobFailure(const absl::Status& error) const override;
  // A peer's connection usually breaks because that host failed the job for a reason of its own
  // (one of its ranks died), which the coordinator is about to tell every host: about one round
  // trip.
  absl::Duration cause_grace() const override { return absl::Milliseconds(500); }
  void Abort(const absl::Status& why) override;
  TransferSpan last_transfer() const override { return transfer_; }

  // The host-level allreduce over the mesh, for the GPU data plane's hierarchical mode (which
  // runs on the same executor thread, after Prepare).
  gpu::CrossHostReduce HostAllreduce();

  const HostLayout& layout() const { return layout_; }
  // The connected mesh, for the job's readiness rounds (steady state). Executor thread only; null
  // until Prepare connected it.
  tcp::TcpMesh* mesh_for_ops() const { return mesh_for_ops_; }

 private:
  const HostLayout layout_;
  const Connect connect_;
  mutable absl::Mutex mu_;
  std::unique_ptr<tcp::TcpMesh> mesh_ ABSL_GUARDED_BY(mu_);  // from Prepare on
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  tcp::TcpMesh* mesh_for_ops_ = nullptr;  // executor thread only: mesh_ once connected
  TransferSpan transfer_;                 // executor thread only: the last Run's
};

}  // namespace ard::dataplane
