#include "daemon/negotiation/steady_rounds.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/collectives/reduce_kernels.h"
#include "daemon/negotiation/fusion_planner.h"

namespace ard::negotiation {
namespace {

constexpr size_t kHeaderWords = 6;  // round, round_min, slots, slots_min, lists, fusion

size_t Words(uint64_t slots) { return (slots + 63) / 64; }

size_t Align8(size_t n) { return (n + 7) / 8 * 8; }

bool Bit(const std::vector<uint64_t>& bits, size_t i) {
  return i / 64 < bits.size() && ((bits[i / 64] >> (i % 64)) & 1) != 0;
}

void SetBit(std::vector<uint64_t>& bits, size_t i) { bits[i / 64] |= uint64_t{1} << (i % 64); }

// Bitwise, so that a scale of -0.0 does not pass for 0.0 (validation compares with ==): where the
// executor scales with an offered value (this host runs the first rank), it is the committed one
// bit for bit, as on every other host.
bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

// The metadata that decides a response (not where this call's input lies).
bool SameMeta(const TensorRequest& a, const TensorRequest& b) {
  const wire::Submit &x = a.meta, &y = b.meta;
  if (x.collective != y.collective || x.dtype != y.dtype || x.reduce_op != y.reduce_op ||
      x.root_rank != y.root_rank || !SameBits(x.prescale, y.prescale) ||
      !SameBits(x.postscale, y.postscale) || x.ndims != y.ndims || x.bytes != y.bytes ||
      x.group_id != y.group_id || x.group_size != y.group_size || x.num_splits != y.num_splits ||
      a.splits != b.splits || a.gpu.has_value() || b.gpu.has_value() || a.name() != b.name()) {
    return false;
  }
  for (uint32_t d = 0; d < x.ndims && d < wire::kMaxDims; ++d) {
    if (x.shape[d] != y.shape[d]) return false;
  }
  return true;
}

// Whether running `collective` reads the entries of ranks on other hosts (tcp_collective.cc):
// allgather (every rank's rows) and alltoall (every rank's splits). An allreduce (Adasum
// included) and a reducescatter reduce this host's ranks' inputs, a broadcast copies the root's
// input on the root's host, a barrier reads nothing; they need only the metadata every rank
// shares, which this host's ranks' entries carry.
bool ReadsEveryRank(wire::Collective collective) {
  return collective != wire::Collective::kAllreduce &&
         collective != wire::Collective::kReducescatter &&
         collective != wire::Collective::kBroadcast && collective != wire::Collective::kBarrier;
}

std::vector<int> RanksOf(const std::vector<bool>& here) {
  std::vector<int> ranks;
  for (size_t r = 0; r < here.size(); ++r) {
    if (here[r]) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

}  // namespace

void CombineVotes(RoundVote& mine, const RoundVote& theirs, const std::vector<CarriedSlot>& carried,
                  bool mine_is_lower) {
  // The data first: it needs each side's own ready bits.
  for (const CarriedSlot& c : carried) {
    uint8_t* data = mine.data.data() + c.offset;
    if (!Bit(mine.ready, c.slot) || !Bit(theirs.ready, c.slot)) {
      std::memset(data, 0, c.bytes);
      continue;
    }
    const size_t count = c.bytes / wire::DataTypeSize(static_cast<uint32_t>(c.dtype));
    if (mine_is_lower) {
      collectives::ReduceInto(data, theirs.data.data() + c.offset, count, c.dtype, c.op);
    } else {  // theirs op mine
      std::vector<uint8_t> lower(theirs.data.begin() + c.offset,
                                 theirs.data.begin() + c.offset + c.bytes);
      collectives::ReduceInto(lower.data(), data, count, c.dtype, c.op);
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
  return (kHeaderWords + 2 * Words(slots)) * sizeof(uint64_t) + data_bytes;
}

void EncodeVote(const RoundVote& vote, uint8_t* out) {
  const size_t words = Words(vote.slots);
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
  const size_t words = Words(slots);
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

SteadyRounds::SteadyRounds(std::vector<bool> here, RoundData data)
    : here_(std::move(here)), local_ranks_(RanksOf(here_)), data_(std::move(data)) {}

void SteadyRounds::Received(CommittedList list) {
  // Held until a round releases it, on every host at once: a tensor of a large job keeps only
  // what this host runs (otherwise about 500 bytes per rank of the job per tensor, decoded).
  PendingList& pending = pending_lists_[++received_];
  for (size_t ri = 0; ri < list.responses.size(); ++ri) {
    Response& r = list.responses[ri];
    // Only single tensors of successful non-join responses, every rank taking part, host
    // memory, not grouped, can be cached for the rounds: those whose response the metadata
    // alone decides. The last tensor of a name counts.
    if (!r.error.ok() || r.collective == wire::Collective::kJoin) continue;
    for (size_t ti = 0; ti < r.tensors.size(); ++ti) {
      ReadyTensor& t = r.tensors[ti];
      const bool every_rank = !t.ranks.empty() && t.ranks.size() == here_.size() &&
                              std::all_of(t.ranks.begin(), t.ranks.end(), [](const auto& q) {
                                return q && !q->gpu && q->meta.group_id < 0;
                              });
      if (!every_rank) {
        pending.cacheable.erase(t.name);
        continue;
      }
      pending.cacheable[t.name] = {ri, ti};
      if (!ReadsEveryRank(r.collective)) Compact(t);
    }
  }
  pending.list = std::move(list);
  changed_ = true;
}

void SteadyRounds::Compact(ReadyTensor& t) const {
  for (size_t r = 1; r < t.ranks.size(); ++r) {
    if (!here_[r]) t.ranks[r].reset();
  }
}

std::optional<size_t> SteadyRounds::HoldableSlot(const std::string& name) const {
  auto slot = slot_of_.find(name);
  if (join_pending_ || slot == slot_of_.end() || last_to_coordinator_.count(name) ||
      held_.count(slot->second)) {
    return std::nullopt;
  }
  return slot->second;
}

bool SteadyRounds::Offer(ReadyTensor& tensor) {
  changed_ = true;
  partly_.erase(tensor.name);
  const std::optional<size_t> slot = HoldableSlot(tensor.name);
  if (slot && Matches(*slots_[*slot], tensor)) {
    held_[*slot] = std::move(tensor);
    return true;
  }
  coordinator_bound_.insert(tensor.name);
  return false;
}

void SteadyRounds::SubmittedPartly(const std::string& name) { partly_.emplace(name, false); }

size_t SteadyRounds::awaited() const {
  size_t n = 0;
  for (const auto& [name, ran_out] : partly_) {
    // A coordinator-bound name votes its to-coordinator bit, not ready: no use waiting for it.
    if (!ran_out && !coordinator_bound_.count(name) && HoldableSlot(name)) ++n;
  }
  return n;
}

void SteadyRounds::WaitedInVain() {
  for (auto& [name, ran_out] : partly_) ran_out = true;
}

void SteadyRounds::SetJoinPending(bool pending) {
  if (pending != join_pending_) changed_ = true;
  join_pending_ = pending;
}

bool SteadyRounds::Matches(const Template& t, const ReadyTensor& tensor) const {
  if (tensor.ranks.size() != here_.size()) return false;
  for (size_t k = 0; k < local_ranks_.size(); ++k) {
    const auto& offered = tensor.ranks[local_ranks_[k]];
    if (!offered || !SameMeta(t.local[k], *offered)) return false;
  }
  return true;
}

RoundVote SteadyRounds::Vote(uint64_t fusion_threshold_bytes) {
  changed_ = false;
  RoundVote v;
  v.round = v.round_min = ++round_;
  v.slots = v.slots_min = slots_.size();
  v.lists = received_;
  v.fusion_threshold_bytes = fusion_threshold_bytes;
  v.ready.assign(Words(v.slots), 0);
  v.to_coordinator.assign(Words(v.slots), 0);
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (!slots_[s]) continue;
    if (join_pending_ || coordinator_bound_.count(slots_[s]->name)) {
      SetBit(v.to_coordinator, s);
    } else if (held_.count(s)) {
      SetBit(v.ready, s);
    }
  }
  carried_ = CarriedLayout();
  v.data.assign(carried_.empty() ? 0 : Align8(carried_.back().offset + carried_.back().bytes), 0);
  for (const CarriedSlot& c : carried_) {
    if (Bit(v.ready, c.slot)) data_.partial(held_.at(c.slot), v.data.data() + c.offset);
  }
  return v;
}

std::vector<CarriedSlot> SteadyRounds::CarriedLayout() const {
  std::vector<CarriedSlot> out;
  if (data_.max_bytes == 0 || !data_.partial) return out;
  size_t end = 0;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (!slots_[s] || slots_[s]->collective != wire::Collective::kAllreduce) continue;
    const wire::Submit& m = slots_[s]->committed().meta;
    const auto dtype = static_cast<wire::DataType>(m.dtype);
    const auto op = static_cast<wire::ReduceOp>(m.reduce_op);
    const size_t offset = Align8(end);
    if (op == wire::ReduceOp::kAdasum || !collectives::ReductionSupported(dtype) ||
        m.bytes > data_.max_bytes || offset + m.bytes > kMaxRoundDataBytes) {
      continue;
    }
    out.push_back(CarriedSlot{s, offset, m.bytes, dtype, op});
    end = offset + m.bytes;
  }
  return out;
}

bool SteadyRounds::Carry(size_t slot, const RoundVote& result, Response& carried) const {
  auto c = std::lower_bound(carried_.begin(), carried_.end(), slot,
                            [](const CarriedSlot& c, size_t s) { return c.slot < s; });
  if (c == carried_.end() || c->slot != slot) return false;
  const auto data = result.data.begin() + c->offset;
  carried.reduced.emplace_back(data, data + c->bytes);
  return true;
}

absl::Status SteadyRounds::Agreed(RoundVote result) {
  if (result.round != round_ || result.round_min != round_ || result.slots != slots_.size() ||
      result.slots_min != slots_.size()) {
    return absl::InternalError(absl::StrCat("readiness round ", round_, " on ", slots_.size(),
                                            " slots: the hosts voted in rounds ", result.round_min,
                                            "..", result.round, " on ", result.slots_min, "..",
                                            result.slots, " slots"));
  }
  result_ = std::move(result);
  return absl::OkStatus();
}

void SteadyRounds::Flush(size_t slot, RoundOutcome* out) {
  auto held = held_.find(slot);
  if (held == held_.end()) return;
  coordinator_bound_.insert(held->second.name);
  out->to_coordinator.push_back(std::move(held->second));
  held_.erase(held);
  changed_ = true;
}

std::optional<RoundOutcome> SteadyRounds::TakeOutcome() {
  if (!outcome_ready()) return std::nullopt;
  const RoundVote result = *std::move(result_);
  result_.reset();
  RoundOutcome out;
  // The agreed tensors, from the table every host voted on (the lists below may change it).
  std::vector<Response> agreed;
  Response carried;  // the carried ones: one response, their results computed
  std::set<std::string> asked;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (!slots_[s]) continue;
    const Template& t = *slots_[s];
    if (Bit(result.to_coordinator, s)) asked.insert(t.name);
    if (!Bit(result.ready, s)) continue;
    auto held = held_.find(s);  // voted ready: held here since the vote
    Response r;
    r.collective = t.collective;
    if (t.every_rank == nullptr) {
      r.tensors.push_back(std::move(held->second));  // this host's ranks, with their inputs
      if (t.first) r.tensors[0].ranks[0] = *t.first;
    } else {
      r.tensors.push_back(*t.every_rank);  // every rank's metadata ...
      for (int rank : local_ranks_) {
        r.tensors[0].ranks[rank] = std::move(held->second.ranks[rank]);
      }  // ... with this host's inputs
    }
    held_.erase(held);
    if (Carry(s, result, carried)) {
      carried.tensors.push_back(std::move(r.tensors[0]));
    } else {
      agreed.push_back(std::move(r));
    }
  }
  for (uint64_t n = released_ + 1; n <= result.lists; ++n) {
    PendingList pending = std::move(pending_lists_.at(n));
    pending_lists_.erase(n);
    Release(pending, &out);
    CommittedList& list = pending.list;
    for (Response& r : list.responses) {
      for (const ReadyTensor& t : r.tensors) asked.erase(t.name);  // asked about the last one
      out.run.push_back(std::move(r));
    }
  }
  released_ = std::max(released_, result.lists);
  out.agreed_tensors = agreed.size() + carried.tensors.size();
  out.carried_tensors = carried.tensors.size();
  if (!carried.tensors.empty()) out.run.push_back(std::move(carried));
  for (Response& r : PlanFusion(std::move(agreed), result.fusion_threshold_bytes)) {
    out.run.push_back(std::move(r));
  }
  last_to_coordinator_ = std::move(asked);
  for (const auto& [name, slot] : slot_of_) {
    if (last_to_coordinator_.count(name)) Flush(slot, &out);
  }
  return out;
}

size_t SteadyRounds::template_rank_entries() const {
  size_t entries = 0;
  for (const auto& t : slots_) {
    if (!t) continue;
    entries += t->local.size() + (t->first ? 1 : 0) +
               (t->every_rank != nullptr ? t->every_rank->ranks.size() : 0);
  }
  return entries;
}

std::vector<ReadyTensor> SteadyRounds::TakeHeld() {
  partly_.clear();
  std::vector<ReadyTensor> out;
  for (auto& [slot, tensor] : held_) out.push_back(std::move(tensor));
  held_.clear();
  return out;
}

std::vector<Response> SteadyRounds::TakePending() {
  std::vector<Response> out;
  for (auto& [n, pending] : pending_lists_) {
    for (Response& r : pending.list.responses) out.push_back(std::move(r));
  }
  pending_lists_.clear();
  result_.reset();
  return out;
}

void SteadyRounds::Release(const PendingList& pending, RoundOutcome* out) {
  const CommittedList& list = pending.list;
  for (uint32_t id : list.cache_evict) {
    for (size_t s = 0; s < slots_.size(); ++s) {
      if (!slots_[s] || slots_[s]->id != id) continue;
      Flush(s, out);  // held for a template that is gone: negotiate it centrally
      slot_of_.erase(slots_[s]->name);
      slots_[s].reset();
    }
  }
  for (const Response& r : list.responses) {
    for (const ReadyTensor& t : r.tensors) {
      coordinator_bound_.erase(t.name);  // committed: the other hosts need not be told
    }
  }
  for (const auto& [id, name] : list.cache_put) {
    auto at = pending.cacheable.find(name);
    if (at == pending.cacheable.end() || slot_of_.count(name)) continue;
    const Response& r = list.responses[at->second.first];
    const wire::Collective collective = r.collective;
    const ReadyTensor* found = &r.tensors[at->second.second];
    Template t{id, name, collective, {}, std::nullopt, nullptr};
    for (int rank : local_ranks_) t.local.push_back(*found->ranks[rank]);
    if (ReadsEveryRank(collective)) {
      t.every_rank = std::make_shared<const ReadyTensor>(*found);
    } else if (!here_[0]) {
      t.first = *found->ranks[0];
    }
    size_t s = 0;
    while (s < slots_.size() && slots_[s]) ++s;
    if (s == slots_.size()) slots_.emplace_back();
    slots_[s] = std::move(t);
    slot_of_[name] = s;
  }
}

}  // namespace ard::negotiation
