// The readiness rounds' slot table (DESIGN.md "Steady state without the coordinator"): each
// cached tensor (a put of the coordinator's response cache whose committed response has every
// rank of the job, host memory, no group) gets the lowest free slot when its list is released,
// with its committed metadata as its template; slots are freed by evictions. Releases happen at
// the same places on every host, so at every vote all hosts hold the same table and a vote's bit
// vectors mean the same tensors.
// Cost per tensor independent of the job's size: a template keeps this host's ranks' metadata
// (what Matches compares) and, only for the collectives whose execution reads every rank's entry
// (allgather's rows, alltoall's splits), one shared immutable copy of the committed tensor. An
// agreed allreduce, broadcast, reducescatter or barrier runs as the held tensor itself: this
// host's ranks' entries (with their inputs) and rank 0's committed metadata (ReadyTensor::first,
// which the executor reads as the tensor's), the others absent: the data planes read nothing else
// of them (each host reduces or copies its own ranks' inputs).
// Pure logic over value types; not thread-safe (owned by SteadyRounds).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/negotiation/round_reducer.h"
#include "daemon/negotiation/round_vote.h"
#include "daemon/negotiation/tensor_request.h"

namespace ard::negotiation {

// Whether running `collective` reads the entries of ranks on other hosts (tcp_collective.cc):
// allgather (every rank's rows) and alltoall (every rank's splits). An allreduce (Adasum
// included) and a reducescatter reduce this host's ranks' inputs, a broadcast copies the root's
// input on the root's host, a barrier reads nothing; they need only the metadata every rank
// shares, which this host's ranks' entries carry.
bool ReadsEveryRank(wire::Collective collective);

class SlotTable {
 public:
  // `here[r]`: rank r of the job runs on this host.
  explicit SlotTable(std::vector<bool> here);

  const std::vector<bool>& here() const { return here_; }
  const std::vector<int>& local_ranks() const { return local_ranks_; }
  // Slots in use or freed (a vote's bit vectors cover them all).
  size_t size() const { return slots_.size(); }
  bool occupied(size_t slot) const { return slots_[slot].has_value(); }
  const std::string& name(size_t slot) const { return slots_[slot]->name; }
  wire::Collective collective(size_t slot) const { return slots_[slot]->collective; }
  std::optional<size_t> Find(const std::string& name) const;
  // Cached tensors by name (in name order).
  const std::map<std::string, size_t>& by_name() const { return slot_of_; }

  // Caches `committed` (every rank's entry present) under `id` in the lowest free slot. No-op
  // when `name` already has a slot.
  void Put(uint32_t id, const std::string& name, wire::Collective collective,
           const ReadyTensor& committed);
  // Frees the slots cached under `id`; returns them.
  std::vector<size_t> Evict(uint32_t id);
  // Whether this host's ranks offered `tensor` with exactly the metadata cached in `slot`.
  bool Matches(size_t slot, const ReadyTensor& tensor) const;
  // The tensor to run when `slot` was agreed: `held` (this host's ranks' entries, with their
  // inputs) completed with the committed metadata the execution reads.
  ReadyTensor Agreed(size_t slot, ReadyTensor held) const;
  // The carried slots (CarriedSlot): cached allreduces of at most `max_bytes` that `reducer`
  // reduces, in slot order. Empty when `max_bytes` is 0.
  std::vector<CarriedSlot> CarriedLayout(uint64_t max_bytes, const RoundReducer& reducer) const;

  // Per-rank metadata entries the templates hold (memory accounting: each is one TensorRequest,
  // about 500 bytes, inline or, in every_rank, behind a present RankEntry): this host's ranks per
  // slot, rank 0's, and every rank where the template keeps the committed tensor.
  size_t template_rank_entries() const;

 private:
  struct Template {
    uint32_t id = 0;
    std::string name;
    wire::Collective collective = wire::Collective::kAllreduce;
    std::vector<TensorRequest> local;    // committed metadata of local_ranks_, in that order
    std::optional<TensorRequest> first;  // rank 0's, when not here and every_rank is null
    // Every rank's committed metadata, for a collective that reads it (null otherwise).
    std::shared_ptr<const ReadyTensor> every_rank;
    // The metadata every rank shares (this host's first rank's).
    const TensorRequest& committed() const {
      return !local.empty() ? local[0] : first ? *first : every_rank->first();
    }
  };

  const std::vector<bool> here_;
  const std::vector<int> local_ranks_;  // the ranks here_ marks, ascending
  std::vector<std::optional<Template>> slots_;
  std::map<std::string, size_t> slot_of_;
};

}  // namespace ard::negotiation
