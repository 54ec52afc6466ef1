// The readiness rounds' vote (DESIGN.md "Steady state without the coordinator"): what one host
// contributes to a round, how two votes combine, and its fixed-size wire form. A round is one
// commutative combine over every host's vote (AND of ready bits, OR of to-coordinator bits, MAX
// of lists received); carried slots' data is reduced where every host is ready.
// Pure functions over value types; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "daemon/negotiation/round_reducer.h"
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

// A cached allreduce whose data the rounds carry: host memory (every slot is), a dtype and op the
// RoundReducer reduces (never Adasum), at most RoundData::max_bytes. The regions are laid out in
// slot order, each at an 8-byte boundary, skipping a slot that would end past kMaxRoundDataBytes:
// a function of the slot table alone, so every host lays out the same (SlotTable::CarriedLayout).
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

// Bit `i` of a vote's bit vector (false past its end) / sets it.
bool VoteBit(const std::vector<uint64_t>& bits, size_t i);
void SetVoteBit(std::vector<uint64_t>& bits, size_t i);
// The words of a bit vector over `slots` slots.
size_t VoteWords(uint64_t slots);

// Folds `theirs` into `mine`. Without carried data commutative and associative: any combining
// tree gives every host the same result. Each slot of `carried` whose ready bit both sides have
// gets (lower op higher) by `reducer` (required when `carried` is not empty), `mine_is_lower`
// saying which side is the lower hosts' partial; its region is zeroed where a side is not ready
// (no reduction ever reads data of a side that is not ready). With data the bits depend on the
// combining tree: CombineInPlace's is fixed by the host count and gives every host the same bits
// (DESIGN.md "Determinism").
void CombineVotes(RoundVote& mine, const RoundVote& theirs,
                  const std::vector<CarriedSlot>& carried = {},
                  const RoundReducer* reducer = nullptr, bool mine_is_lower = true);
// Fixed-size wire form: VoteBytes(slots, data bytes) bytes, native byte order (hosts of a job
// share one).
size_t VoteBytes(uint64_t slots, size_t data_bytes = 0);
void EncodeVote(const RoundVote& vote, uint8_t* out);
RoundVote DecodeVote(const uint8_t* in, uint64_t slots, size_t data_bytes = 0);

}  // namespace ard::negotiation
