// The data of every collective for ranks on one host (a single-host job): reads each rank's input
// from its arena, writes results into slots of the job's result arena. Reductions run in rank
// order with the kernels of daemon/collectives (Adasum: its tree over the ranks in rank order),
// so results are deterministic and every rank reads the same bytes (allreduce/allgather/broadcast
// share one slot; alltoall/reducescatter give each rank its own). An error concerns only the response's tensors: the job goes on.
// Stateless besides the job size; runs on the job's executor thread (or inline on the loop).
#pragma once

#include "daemon/dataplane/collective.h"

namespace ard::dataplane {

class LocalCollective : public Collective {
 public:
  explicit LocalCollective(int size) : size_(size) {}

  absl::Status Run(const negotiation::Response& response, const SlotAllocator& allocate,
                   std::vector<RankResults>* out, uint64_t* bytes_reduced) override;
  absl::Status JobFailure(const absl::Status&) const override { return absl::OkStatus(); }
  // Small responses cost less than the executor thread's wake-up (~100 us here).
  bool RunsInline(uint64_t bytes) const override { return bytes <= (64 << 10); }

 private:
  const int size_;
};

}  // namespace ard::dataplane
