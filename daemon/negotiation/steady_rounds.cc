#include "daemon/negotiation/steady_rounds.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/negotiation/fusion_planner.h"

namespace ard::negotiation {
namespace {

size_t Align8(size_t n) { return (n + 7) / 8 * 8; }

}  // namespace

SteadyRounds::SteadyRounds(std::vector<bool> here, RoundData data)
    : data_(std::move(data)), table_(std::move(here)) {}

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
      const bool every_rank = !t.ranks.empty() && t.ranks.size() == table_.here().size() &&
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
    if (!table_.here()[r]) t.ranks[r].reset();
  }
}

std::optional<size_t> SteadyRounds::HoldableSlot(const std::string& name) const {
  const std::optional<size_t> slot = table_.Find(name);
  if (join_pending_ || !slot || last_to_coordinator_.count(name) || held_.count(*slot)) {
    return std::nullopt;
  }
  return slot;
}

bool SteadyRounds::Offer(ReadyTensor& tensor) {
  changed_ = true;
  partly_.erase(tensor.name);
  const std::optional<size_t> slot = HoldableSlot(tensor.name);
  if (slot && table_.Matches(*slot, tensor)) {
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

RoundVote SteadyRounds::Vote(uint64_t fusion_threshold_bytes) {
  changed_ = false;
  RoundVote v;
  v.round = v.round_min = ++round_;
  v.slots = v.slots_min = table_.size();
  v.lists = received_;
  v.fusion_threshold_bytes = fusion_threshold_bytes;
  v.ready.assign(VoteWords(v.slots), 0);
  v.to_coordinator.assign(VoteWords(v.slots), 0);
  for (size_t s = 0; s < table_.size(); ++s) {
    if (!table_.occupied(s)) continue;
    if (join_pending_ || coordinator_bound_.count(table_.name(s))) {
      SetVoteBit(v.to_coordinator, s);
    } else if (held_.count(s)) {
      SetVoteBit(v.ready, s);
    }
  }
  carried_ = data_.reducer == nullptr ? std::vector<CarriedSlot>()
                                      : table_.CarriedLayout(data_.max_bytes, *data_.reducer);
  v.data.assign(carried_.empty() ? 0 : Align8(carried_.back().offset + carried_.back().bytes), 0);
  for (const CarriedSlot& c : carried_) {
    if (VoteBit(v.ready, c.slot)) {
      data_.reducer->Partial(held_.at(c.slot), v.data.data() + c.offset);
    }
  }
  return v;
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
  if (result.round != round_ || result.round_min != round_ || result.slots != table_.size() ||
      result.slots_min != table_.size()) {
    return absl::InternalError(absl::StrCat("readiness round ", round_, " on ", table_.size(),
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
  for (size_t s = 0; s < table_.size(); ++s) {
    if (!table_.occupied(s)) continue;
    if (VoteBit(result.to_coordinator, s)) asked.insert(table_.name(s));
    if (!VoteBit(result.ready, s)) continue;
    auto held = held_.find(s);  // voted ready: held here since the vote
    Response r;
    r.collective = table_.collective(s);
    r.tensors.push_back(table_.Agreed(s, std::move(held->second)));
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
  for (const auto& [name, slot] : table_.by_name()) {
    if (last_to_coordinator_.count(name)) Flush(slot, &out);
  }
  return out;
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
    for (size_t s : table_.Evict(id)) Flush(s, out);  // held for a template that is gone
  }
  for (const Response& r : list.responses) {
    for (const ReadyTensor& t : r.tensors) {
      coordinator_bound_.erase(t.name);  // committed: the other hosts need not be told
    }
  }
  for (const auto& [id, name] : list.cache_put) {
    auto at = pending.cacheable.find(name);
    if (at == pending.cacheable.end()) continue;
    const Response& r = list.responses[at->second.first];
    table_.Put(id, name, r.collective, r.tensors[at->second.second]);
  }
}

}  // namespace ard::negotiation
