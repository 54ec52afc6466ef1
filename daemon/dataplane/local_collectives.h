// The data of every collective for ranks on one host: reads each rank's input from its arena,
// writes results into slots of the job's result arena. Reductions run in rank order with the
// kernels of daemon/collectives, so results are deterministic and every rank reads the same bytes
// (allreduce/allgather/broadcast share one slot; alltoall/reducescatter give each rank its own).
// Stateless; runs on the job's executor thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/negotiation/tensor_request.h"
#include "daemon/shm/result_arena.h"

namespace ard::dataplane {

struct RankResult {
  std::shared_ptr<shm::ResultSlot> slot;  // null when the result has no bytes
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;  // alltoall: rows from each rank; allgather: rows of each rank
};

using SlotAllocator = std::function<absl::StatusOr<std::shared_ptr<shm::ResultSlot>>(uint64_t)>;

// Fills `(*out)[rank]` for every rank that submitted `tensor`. `*bytes_reduced` grows by one
// rank's input size.
absl::Status RunLocalCollective(const negotiation::ReadyTensor& tensor, int size,
                                const SlotAllocator& allocate, std::vector<RankResult>* out,
                                uint64_t* bytes_reduced);

}  // namespace ard::dataplane
