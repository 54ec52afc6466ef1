// Coordinator-free steady state (DESIGN.md "Steady state without the coordinator"): one host's
// side of the readiness rounds in which the hosts of a cross-host job agree among themselves
// which cached tensors every host is ready for, so the coordinator is asked only about cache
// misses, errors and membership.
//
// Model. The coordinator's committed lists (one per JobEvent that commits responses or changes
// the response cache) arrive on every host in one stream order, numbered 1, 2, ...; this class
// holds them until a round releases them (a tensor that runs on this host's ranks alone with
// only those ranks' entries and rank 0's, as an agreed one below: Compact). A round r is one
// commutative combine over every host's RoundVote (CombineVotes: AND of ready bits, OR of
// to-coordinator bits, MAX of lists received):
// afterwards each host runs, in this order, (1) the lists up to the round's `lists` (waiting for
// the ones still in flight to it), then (2) the tensors every host was ready for, in slot order:
// the carried ones (below) in one response with their results, the others fused, then (3) sends
// the held tensors some host asked to negotiate to the coordinator. Every
// list and every agreed tensor thus runs at the same place of one sequence on every host (the
// argument is in DESIGN.md).
// Slots: the slot table (slot_table.h) every host holds alike; the vote (round_vote.h) has one
// ready and one to-coordinator bit per slot.
// Carried slots: small allreduces (CarriedSlot) whose data travels in the vote: each host writes
// its ranks' reduction of each held one, the combine reduces a slot's data where both sides are
// ready, and an agreed one needs no allreduce of its own.
//
// Pure logic over value types; not thread-safe (the job's control loop).
// Lifecycle: 1. Received() for each coordinator list, Offer() for each host-ready tensor,
// SubmittedPartly() for a tensor some local ranks submitted, SetJoinPending() while a local join
// waits; 2. when changed() (or a peer started a round): the driver may delay the vote while
// awaited() (WaitedInVain() when it gives up), then Vote(), the data plane combines the votes,
// Agreed(result); 3. TakeOutcome() until it answers (it waits for lists up to result.lists); then
// back to 1.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/negotiation/committed_list.h"
#include "daemon/negotiation/round_reducer.h"
#include "daemon/negotiation/round_vote.h"
#include "daemon/negotiation/slot_table.h"
#include "daemon/negotiation/tensor_request.h"

namespace ard::negotiation {

// What a round makes this host do, in order.
struct RoundOutcome {
  std::vector<Response> run;                // lists' responses, then the agreed tensors
  std::vector<ReadyTensor> to_coordinator;  // held tensors to negotiate centrally now
  size_t agreed_tensors = 0;                // tensors of `run` agreed by the round
  size_t carried_tensors = 0;               // of those, carried (Response::reduced set)
};

// Carrying small allreduces' data in the rounds: `max_bytes` per tensor (0: none; every host of
// a job uses the same, since it decides the vote's layout); `reducer` computes this host's
// partials and reduces them in the combine (null: nothing carried).
struct RoundData {
  uint64_t max_bytes = 0;
  std::shared_ptr<const RoundReducer> reducer;
};

class SteadyRounds {
 public:
  // `here[r]`: rank r of the job runs on this host.
  explicit SteadyRounds(std::vector<bool> here, RoundData data = {});

  // The next coordinator list in stream order; held until a round releases it.
  void Received(CommittedList list);
  // A tensor every local rank submitted. Held for agreement (true, `tensor` moved from) when it
  // is cached with exactly this metadata for this host's ranks and no host asked for it
  // centrally; otherwise false: the caller sends it to the coordinator (remembered until a list
  // commits it, so that the other hosts are told to do the same).
  bool Offer(ReadyTensor& tensor);
  // A local rank's join is waiting: this host asks every cached tensor to go to the coordinator
  // (whose readiness table completes joins).
  void SetJoinPending(bool pending);
  // Some but not all of this host's ranks submitted `name` (it waits in the job's readiness
  // table), so its offer may come soon. Forgotten when it is offered or the rounds end.
  void SubmittedPartly(const std::string& name);
  // The partly submitted tensors worth delaying this host's vote for: each would be held and
  // voted ready if offered now (cached in a slot, not held, no host asked for it centrally, no
  // local join waiting), and no wait for it ran out before. A delay changes only when this host
  // votes, never what its vote is a function of (the slot table and what was offered by then).
  size_t awaited() const;
  // A wait for awaited() ran out: the tensors partly submitted now delay no further vote until
  // they are offered (a rank that never submits one, or submits in another order, costs one
  // wait per tensor, not one per round).
  void WaitedInVain();

  // Something happened since this host last voted: it should start a round.
  bool changed() const { return changed_; }
  // A round's result is waiting for coordinator lists: no vote until TakeOutcome answered.
  bool applying() const { return result_.has_value(); }
  uint64_t lists_received() const { return received_; }
  size_t held() const { return held_.size(); }

  RoundVote Vote(uint64_t fusion_threshold_bytes);
  // The carried slots of the last Vote (its data's layout), for the combine.
  const std::vector<CarriedSlot>& carried() const { return carried_; }
  // The round's combined result: Internal error when the hosts voted in different rounds or on
  // different tables (a broken invariant: the job must fail).
  absl::Status Agreed(RoundVote result);
  // The outcome of the round Agreed() took, once every list it releases arrived; nullopt before.
  std::optional<RoundOutcome> TakeOutcome();
  bool outcome_ready() const { return result_ && received_ >= result_->lists; }
  // The rounds are over (the job failed, or the data plane broke): the tensors held, and the
  // responses of the lists not released yet, in order; nothing is held or released after this.
  std::vector<ReadyTensor> TakeHeld();
  std::vector<Response> TakePending();

  // SlotTable::template_rank_entries (memory accounting).
  size_t template_rank_entries() const { return table_.template_rank_entries(); }

 private:
  // A received list, and which of its tensors every rank took part in (without GPU memory or a
  // group), as it arrived: Received drops the other hosts' entries of those this host runs on
  // its own ranks alone (Compact), and Release makes templates of them.
  struct PendingList {
    CommittedList list;
    // The tensors a cache put may make a template of (every rank taking part, as the list
    // arrived: Received drops other hosts' entries since): name -> (response, tensor) index.
    std::map<std::string, std::pair<size_t, size_t>> cacheable;
  };
  // Drops the entries of `t` (every rank present) that this host's data plane never reads:
  // other hosts' ranks' but rank 0's, whose metadata every rank shares (`first()`).
  void Compact(ReadyTensor& t) const;
  // Applies a released list's cache decisions to the slot table.
  void Release(const PendingList& pending, RoundOutcome* out);
  // The slot `name` would be held in if offered now with its template's metadata, if any.
  std::optional<size_t> HoldableSlot(const std::string& name) const;
  void Flush(size_t slot, RoundOutcome* out);
  // The tensor agreed in `slot`, when that slot is carried: appends the round's result for it to
  // carried.reduced and returns true. False otherwise.
  bool Carry(size_t slot, const RoundVote& result, Response& carried) const;

  const RoundData data_;
  SlotTable table_;
  uint64_t round_ = 0;
  bool changed_ = false;
  bool join_pending_ = false;
  uint64_t received_ = 0;                          // lists received
  uint64_t released_ = 0;                          // lists released by rounds
  std::map<uint64_t, PendingList> pending_lists_;  // received, not released; by number
  std::map<size_t, ReadyTensor> held_;             // slot -> this host's tensor (with inputs)
  std::set<std::string> coordinator_bound_;        // sent centrally, not committed yet
  std::set<std::string> last_to_coordinator_;      // names the last round asked to go centrally
  std::map<std::string, bool> partly_;  // partly submitted, not offered -> a wait for it ran out
  std::optional<RoundVote> result_;            // agreed, waiting for lists
  std::vector<CarriedSlot> carried_;           // the last vote's layout
};

}  // namespace ard::negotiation
