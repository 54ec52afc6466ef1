// First-fit allocator of aligned byte ranges inside one segment, with coalescing of free
// neighbours. Bookkeeping only (it never touches the memory). Not thread-safe: the owner locks.
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace ard::shm {

class SlotAllocator {
 public:
  SlotAllocator(uint64_t capacity, uint64_t alignment);

  // Offset of a free range of at least `bytes` (rounded up to the alignment; 0 -> one unit).
  std::optional<uint64_t> Allocate(uint64_t bytes);
  // Frees the range that Allocate returned at `offset`. Returns false if there is none.
  bool Free(uint64_t offset);

  uint64_t capacity() const { return capacity_; }
  uint64_t used_bytes() const { return used_; }
  bool empty() const { return allocated_.empty(); }

 private:
  uint64_t RoundUp(uint64_t bytes) const;

  const uint64_t capacity_;
  const uint64_t alignment_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_;       // offset -> length, no two adjacent
  std::map<uint64_t, uint64_t> allocated_;  // offset -> length
};

}  // namespace ard::shm
