// Value types of negotiation: what one rank asked for (TensorRequest), a tensor every rank is
// ready for (ReadyTensor), and what the executor runs (Response). Plain data; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/common/heap_optional.h"
#include "daemon/common/tensor_bytes.h"
#include "proto/local_wire.h"

namespace ard::negotiation {

struct TensorRequest {
  int rank = -1;
  uint64_t request_id = 0;
  wire::Submit meta{};          // layout validated by the frame codec
  std::vector<int64_t> splits;  // alltoall
  TensorBytes input;            // where the rank's input lies (bounds-checked)
  // GPU path: set for a GPU_SUBMIT (the input lies in the rank's GPU staging arena; `input` is
  // empty).
  std::optional<wire::GpuPlacement> gpu;

  std::string name() const { return meta.name; }
  wire::Collective collective() const { return static_cast<wire::Collective>(meta.collective); }
};

// One rank's request in a ReadyTensor, or none (std::nullopt). Held on the heap, so that an
// absent rank costs a pointer, not a TensorRequest (about 500 bytes): a host-ready tensor of a
// large job has an entry for every rank of the job but only this host's ranks present.
using RankEntry = HeapOptional<TensorRequest>;

struct ReadyTensor {
  std::string name;
  // One entry per rank of the job, indexed by rank; absent for a rank that has joined
  // (contributes the identity) or, in a host-ready tensor, for another host's rank (and in what
  // the steady state runs, SteadyRounds, for another host's rank but rank 0).
  std::vector<RankEntry> ranks;

  // The first rank's request (every present rank's metadata agrees once validated).
  const TensorRequest& first() const;
};

struct Response {
  wire::Collective collective = wire::Collective::kAllreduce;
  std::vector<ReadyTensor> tensors;  // more than one for a grouped allreduce
  absl::Status error;                // not OK: fail every request of `tensors` with it
  int join_last_rank = -1;           // kJoin: the rank that joined last
  // No tensors: the job's GPU data plane starts here in the job's order (with the steady state,
  // where a round releases it; the executor holds the GPU collective until then).
  bool attach_gpu = false;
  // Allreduces a steady-state round carried (SteadyRounds' CarriedSlot): tensor i's reduction
  // over every host, before the postscale (and Average's division), computed in the round; the
  // data plane only writes the results. Empty otherwise.
  std::vector<std::vector<uint8_t>> reduced;
};

// Upper-case names used in Horovod-style messages ("ALLREDUCE") and dtype names ("float32").
const char* CollectiveName(wire::Collective collective);
const char* DataTypeName(uint32_t dtype);
const char* ReduceOpName(uint32_t op);

}  // namespace ard::negotiation
