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
// Slots: each cached tensor (a put of the coordinator's response cache whose committed response
// has every rank of the job, host memory, no group) gets the lowest free slot when its list is
// released, with its committed metadata as its template; slots are freed by evictions. Releases
// happen at the same places on every host, so at every vote all hosts hold the same slot table
// and the bit vectors mean the same tensors.
// Cost per tensor independent of the job's size: a template keeps this host's ranks' metadata
// (what Offer compares) and, only for the collectives whose execution reads every rank's entry
// (allgather's rows, alltoall's splits), one shared immutable copy of the committed tensor. An
// agreed allreduce, broadcast, reducescatter or barrier runs as the held tensor itself: this
// host's ranks' entries (with their inputs) and rank 0's committed metadata (ReadyTensor::first,
// which the executor reads as the tensor's, as with every rank's entries), the others absent:
// the data planes read nothing else of them (each host reduces or copies its own ranks' inputs).
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
#include "daemon/negotiation/tensor_request.h"

namespace ard::negotiation {

// One host's contribution to a round and, combined over every host, the round's result.
struct RoundVote {
  uint64_t round = 0;  // rounds are numbered from 1; checked equal on every host
  uint64_t slots = 0;  // size of the slot table voted on; checked equal on every host
  uint64_t lists = 0;  // coordinator lists received (result: the most any host received)
  uint64_t fusion_threshold_bytes = 0;   // result: the smallest (every host fuses the same way)
  std::vector<uint64_t> ready;           // bit per slot: this host holds it (result: AND)
  std::vector<uint64_t> to_coordinator;  // bit per slot: negotiate it centrally (result: OR)
  // Combine bookkeeping: the smallest round and slot count seen (equal to round/slots on every
  // host exactly when all voted in the same round with the same table).
  uint64_t round_min = 0;
  uint64_t slots_min = 0;
  // The carried slots' regions (CarriedSlot): this host's ranks' reduction of each one it holds,
  // zeros elsewhere (result: the reduction over every host where every host is ready).
  std::vector<uint8_t> data;
};

// A cached allreduce whose data the rounds carry: host memory (every slot is), reduce op not
// Adasum, a reducible dtype, at most RoundData::max_bytes. The regions are laid out in slot order,
// each at an 8-byte boundary, skipping a slot that would end past kMaxRoundDataBytes: a function
// of the slot table alone, so every host lays out the same.
struct CarriedSlot {
  size_t slot = 0;
  size_t offset = 0;  // in RoundVote::data
  uint64_t bytes = 0;
  wire::DataType dtype = wire::DataType::kFloat32;
  wire::ReduceOp op = wire::ReduceOp::kSum;
};
// Every round sends the whole carried region, held or not: the cap bounds what a round with
// nothing to carry costs (16 KiB: about 13 us a hop at 10 Gb/s, against a small allreduce's
// round trip per hop that a carried tensor saves).
inline constexpr size_t kMaxRoundDataBytes = 16 << 10;

// Folds `theirs` into `mine`. Without carried data commutative and associative: any combining
// tree gives every host the same result. Each slot of `carried` whose ready bit both sides have
// gets (lower op higher) by ReduceInto, `mine_is_lower` saying which side is the lower hosts'
// partial; its region is zeroed where a side is not ready (no reduction ever reads data of a side
// that is not ready). With data the bits depend on the combining tree: CombineInPlace's is fixed
// by the host count and gives every host the same bits (DESIGN.md "Determinism").
void CombineVotes(RoundVote& mine, const RoundVote& theirs,
                  const std::vector<CarriedSlot>& carried = {}, bool mine_is_lower = true);
// Fixed-size wire form: VoteBytes(slots, data bytes) bytes, native byte order (hosts of a job
// share one).
size_t VoteBytes(uint64_t slots, size_t data_bytes = 0);
void EncodeVote(const RoundVote& vote, uint8_t* out);
RoundVote DecodeVote(const uint8_t* in, uint64_t slots, size_t data_bytes = 0);

// One coordinator list: a JobEvent's responses and its response-cache decisions.
struct CommittedList {
  std::vector<Response> responses;
  std::vector<uint32_t> cache_evict;
  std::vector<std::pair<uint32_t, std::string>> cache_put;  // id, tensor name
};

// What a round makes this host do, in order.
struct RoundOutcome {
  std::vector<Response> run;                // lists' responses, then the agreed tensors
  std::vector<ReadyTensor> to_coordinator;  // held tensors to negotiate centrally now
  size_t agreed_tensors = 0;                // tensors of `run` agreed by the round
  size_t carried_tensors = 0;               // of those, carried (Response::reduced set)
};

// Carrying small allreduces' data in the rounds: `max_bytes` per tensor (0: none; every host of
// a job uses the same, since it decides the vote's layout); `partial` writes this host's ranks'
// reduction of a held tensor (its bytes) to `out`, prescale applied, as the data plane would.
struct RoundData {
  uint64_t max_bytes = 0;
  std::function<void(const ReadyTensor& tensor, uint8_t* out)> partial;
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

  // Per-rank metadata entries the slot templates hold (memory accounting: each is one
  // TensorRequest, about 500 bytes, inline or, in every_rank, behind a present RankEntry): this
  // host's ranks per slot, rank 0's, and every rank where the template keeps the committed
  // tensor (see Slots above).
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
  bool Matches(const Template& t, const ReadyTensor& tensor) const;
  // The slot `name` would be held in if offered now with its template's metadata, if any.
  std::optional<size_t> HoldableSlot(const std::string& name) const;
  void Flush(size_t slot, RoundOutcome* out);
  std::vector<CarriedSlot> CarriedLayout() const;
  // The tensor agreed in `slot`, when that slot is carried: appends the round's result for it to
  // carried.reduced and returns true. False otherwise.
  bool Carry(size_t slot, const RoundVote& result, Response& carried) const;

  const std::vector<bool> here_;
  const std::vector<int> local_ranks_;  // the ranks here_ marks, ascending
  const RoundData data_;
  uint64_t round_ = 0;
  bool changed_ = false;
  bool join_pending_ = false;
  uint64_t received_ = 0;                          // lists received
  uint64_t released_ = 0;                          // lists released by rounds
  std::map<uint64_t, PendingList> pending_lists_;  // received, not released; by number
  std::vector<std::optional<Template>> slots_;
  std::map<std::string, size_t> slot_of_;
  std::map<size_t, ReadyTensor> held_;         // slot -> this host's tensor (with inputs)
  std::set<std::string> coordinator_bound_;    // sent centrally, not committed yet
  std::set<std::string> last_to_coordinator_;  // names the last round asked to go centrally
  std::map<std::string, bool> partly_;  // partly submitted, not offered -> a wait for it ran out
  std::optional<RoundVote> result_;            // agreed, waiting for lists
  std::vector<CarriedSlot> carried_;           // the last vote's layout
};

}  // namespace ard::negotiation
