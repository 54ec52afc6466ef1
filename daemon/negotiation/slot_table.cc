#include "daemon/negotiation/slot_table.h"

#include <cstring>

namespace ard::negotiation {
namespace {

size_t Align8(size_t n) { return (n + 7) / 8 * 8; }

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

std::vector<int> RanksOf(const std::vector<bool>& here) {
  std::vector<int> ranks;
  for (size_t r = 0; r < here.size(); ++r) {
    if (here[r]) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

}  // namespace

bool ReadsEveryRank(wire::Collective collective) {
  return collective != wire::Collective::kAllreduce &&
         collective != wire::Collective::kReducescatter &&
         collective != wire::Collective::kBroadcast && collective != wire::Collective::kBarrier;
}

SlotTable::SlotTable(std::vector<bool> here)
    : here_(std::move(here)), local_ranks_(RanksOf(here_)) {}

std::optional<size_t> SlotTable::Find(const std::string& name) const {
  auto slot = slot_of_.find(name);
  if (slot == slot_of_.end()) return std::nullopt;
  return slot->second;
}

void SlotTable::Put(uint32_t id, const std::string& name, wire::Collective collective,
                    const ReadyTensor& committed) {
  if (slot_of_.count(name)) return;
  Template t{id, name, collective, {}, std::nullopt, nullptr};
  for (int rank : local_ranks_) t.local.push_back(*committed.ranks[rank]);
  if (ReadsEveryRank(collective)) {
    t.every_rank = std::make_shared<const ReadyTensor>(committed);
  } else if (!here_[0]) {
    t.first = *committed.ranks[0];
  }
  size_t s = 0;
  while (s < slots_.size() && slots_[s]) ++s;
  if (s == slots_.size()) slots_.emplace_back();
  slots_[s] = std::move(t);
  slot_of_[name] = s;
}

std::vector<size_t> SlotTable::Evict(uint32_t id) {
  std::vector<size_t> freed;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (!slots_[s] || slots_[s]->id != id) continue;
    slot_of_.erase(slots_[s]->name);
    slots_[s].reset();
    freed.push_back(s);
  }
  return freed;
}

bool SlotTable::Matches(size_t slot, const ReadyTensor& tensor) const {
  const Template& t = *slots_[slot];
  if (tensor.ranks.size() != here_.size()) return false;
  for (size_t k = 0; k < local_ranks_.size(); ++k) {
    const auto& offered = tensor.ranks[local_ranks_[k]];
    if (!offered || !SameMeta(t.local[k], *offered)) return false;
  }
  return true;
}

ReadyTensor SlotTable::Agreed(size_t slot, ReadyTensor held) const {
  const Template& t = *slots_[slot];
  if (t.every_rank == nullptr) {  // this host's ranks, with their inputs
    if (t.first) held.ranks[0] = *t.first;
    return held;
  }
  ReadyTensor run = *t.every_rank;  // every rank's metadata ...
  for (int rank : local_ranks_) run.ranks[rank] = std::move(held.ranks[rank]);
  return run;  // ... with this host's inputs
}

std::vector<CarriedSlot> SlotTable::CarriedLayout(uint64_t max_bytes,
                                                  const RoundReducer& reducer) const {
  std::vector<CarriedSlot> out;
  if (max_bytes == 0) return out;
  size_t end = 0;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (!slots_[s] || slots_[s]->collective != wire::Collective::kAllreduce) continue;
    const wire::Submit& m = slots_[s]->committed().meta;
    const auto dtype = static_cast<wire::DataType>(m.dtype);
    const auto op = static_cast<wire::ReduceOp>(m.reduce_op);
    const size_t offset = Align8(end);
    if (op == wire::ReduceOp::kAdasum || !reducer.Reduces(dtype, op) || m.bytes > max_bytes ||
        offset + m.bytes > kMaxRoundDataBytes) {
      continue;
    }
    out.push_back(CarriedSlot{s, offset, m.bytes, dtype, op});
    end = offset + m.bytes;
  }
  return out;
}

size_t SlotTable::template_rank_entries() const {
  size_t entries = 0;
  for (const auto& t : slots_) {
    if (!t) continue;
    entries += t->local.size() + (t->first ? 1 : 0) +
               (t->every_rank != nullptr ? t->every_rank->ranks.size() : 0);
  }
  return entries;
}

}  // namespace ard::negotiation
