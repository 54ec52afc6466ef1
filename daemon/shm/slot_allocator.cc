#include "daemon/shm/slot_allocator.h"

namespace ard::shm {

SlotAllocator::SlotAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity - capacity % alignment), alignment_(alignment) {
  if (capacity_ > 0) free_[0] = capacity_;
}

uint64_t SlotAllocator::RoundUp(uint64_t bytes) const {
  if (bytes == 0) return alignment_;
  return (bytes + alignment_ - 1) / alignment_ * alignment_;
}

std::optional<uint64_t> SlotAllocator::Allocate(uint64_t bytes) {
  if (bytes > capacity_) return std::nullopt;
  const uint64_t need = RoundUp(bytes);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const uint64_t offset = it->first;
    const uint64_t rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_[offset + need] = rest;
    allocated_[offset] = need;
    used_ += need;
    return offset;
  }
  return std::nullopt;
}

bool SlotAllocator::Free(uint64_t offset) {
  auto a = allocated_.find(offset);
  if (a == allocated_.end()) return false;
  uint64_t start = offset;
  uint64_t length = a->second;
  used_ -= length;
  allocated_.erase(a);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + length) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = length;
  return true;
}

}  // namespace ard::shm
