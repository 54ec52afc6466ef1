#include "daemon/negotiation/round_vote.h"

#include <algorithm>
#include <cstring>

namespace ard::negotiation {
namespace {

constexpr size_t kHeaderWords = 6;  // round, round_min, slots, slots_min, lists, fusion

}  // namespace

size_t VoteWords(uint64_t slots) { return (slots + 63) / 64; }

bool VoteBit(const std::vector<uint64_t>& bits, size_t i) {
  return i / 64 < bits.size() && ((bits[i / 64] >> (i % 64)) & 1) != 0;
}

void SetVoteBit(std::vector<uint64_t>& bits, size_t i) { bits[i / 64] |= uint64_t{1} << (i % 64); }

void CombineVotes(RoundVote& mine, const RoundVote& theirs, const std::vector<CarriedSlot>& carried,
                  const RoundReducer* reducer, bool mine_is_lower) {
  // The data first: it needs each side's own ready bits.
  for (const CarriedSlot& c : carried) {
    uint8_t* data = mine.data.data() + c.offset;
    if (!VoteBit(mine.ready, c.slot) || !VoteBit(theirs.ready, c.slot)) {
      std::memset(data, 0, c.bytes);
      continue;
    }
    const size_t count = c.bytes / wire::DataTypeSize(static_cast<uint32_t>(c.dtype));
    if (mine_is_lower) {
      reducer->ReduceInto(data, theirs.data.data() + c.offset, count, c.dtype, c.op);
    } else {  // theirs op mine
      std::vector<uint8_t> lower(theirs.data.begin() + c.offset,
                                 theirs.data.begin() + c.offset + c.bytes);
      reducer->ReduceInto(lower.data(), data, count, c.dtype, c.op);
      std::memcpy(data, lower.data(), c.bytes);
    }
  }
  mine.round = std::max(mine.round, theirs.round);
  mine.round_min = std::min(mine.round_min, theirs.round_min);
  mine.slots = std::max(mine.slots, theirs.slots);
  mine.slots_min = std::min(mine.slots_min, theirs.slots_min);
  mine.lists = std::max(mine.lists, theirs.lists);
  mine.fusion_threshold_bytes =
      std::min(mine.fusion_threshold_bytes, theirs.fusion_threshold_bytes);
  const size_t words = std::max(mine.ready.size(), theirs.ready.size());
  mine.ready.resize(words, 0);
  mine.to_coordinator.resize(words, 0);
  for (size_t w = 0; w < words; ++w) {
    mine.ready[w] &= w < theirs.ready.size() ? theirs.ready[w] : 0;
    mine.to_coordinator[w] |= w < theirs.to_coordinator.size() ? theirs.to_coordinator[w] : 0;
  }
}

size_t VoteBytes(uint64_t slots, size_t data_bytes) {
  return (kHeaderWords + 2 * VoteWords(slots)) * sizeof(uint64_t) + data_bytes;
}

void EncodeVote(const RoundVote& vote, uint8_t* out) {
  const size_t words = VoteWords(vote.slots);
  std::vector<uint64_t> w = {vote.round,     vote.round_min, vote.slots,
                             vote.slots_min, vote.lists,     vote.fusion_threshold_bytes};
  w.resize(kHeaderWords + 2 * words, 0);
  for (size_t i = 0; i < words && i < vote.ready.size(); ++i) w[kHeaderWords + i] = vote.ready[i];
  for (size_t i = 0; i < words && i < vote.to_coordinator.size(); ++i) {
    w[kHeaderWords + words + i] = vote.to_coordinator[i];
  }
  std::memcpy(out, w.data(), w.size() * sizeof(uint64_t));
  if (!vote.data.empty()) {
    std::memcpy(out + w.size() * sizeof(uint64_t), vote.data.data(), vote.data.size());
  }
}

RoundVote DecodeVote(const uint8_t* in, uint64_t slots, size_t data_bytes) {
  const size_t words = VoteWords(slots);
  std::vector<uint64_t> w(kHeaderWords + 2 * words);
  std::memcpy(w.data(), in, w.size() * sizeof(uint64_t));
  RoundVote vote;
  vote.round = w[0];
  vote.round_min = w[1];
  vote.slots = w[2];
  vote.slots_min = w[3];
  vote.lists = w[4];
  vote.fusion_threshold_bytes = w[5];
  vote.ready.assign(w.begin() + kHeaderWords, w.begin() + kHeaderWords + words);
  vote.to_coordinator.assign(w.begin() + kHeaderWords + words, w.end());
  const uint8_t* data = in + w.size() * sizeof(uint64_t);
  vote.data.assign(data, data + data_bytes);
  return vote;
}

}  // namespace ard::negotiation
