// A job's result arena (DESIGN.md "Shared memory"): daemon-owned memfd segments that every process
// of the job maps read-only; collectives write their results here and clients copy them out.
// Grows by adding segments (each new segment must be announced to the job's clients before a
// COMPLETE names it) up to a cap; slots are freed when the last holder drops its ResultSlot.
// Thread-safe: executors allocate, the control loop frees (on RELEASE or a client's exit).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/shm/mapped_segment.h"
#include "daemon/shm/slot_allocator.h"

namespace ard::shm {

class ResultArena;

// One allocated range. Destroying the last shared_ptr to it frees the range.
struct ResultSlot {
  uint32_t segment = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint8_t* data = nullptr;
};

class ResultArena : public std::enable_shared_from_this<ResultArena> {
 public:
  static absl::StatusOr<std::shared_ptr<ResultArena>> Create(std::string job,
                                                             uint64_t first_segment_bytes,
                                                             uint64_t max_bytes);

  // `*new_segment` is set to the index of a segment created for this slot, else -1.
  absl::StatusOr<std::shared_ptr<ResultSlot>> Allocate(uint64_t bytes, int* new_segment);

  std::shared_ptr<MappedSegment> segment(uint32_t index) const;
  uint64_t used_bytes() const;
  uint64_t mapped_bytes() const;

 private:
  ResultArena(std::string job, uint64_t max_bytes) : job_(std::move(job)), max_bytes_(max_bytes) {}
  absl::Status AddSegment(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Free(uint32_t segment, uint64_t offset);

  struct Segment {
    std::shared_ptr<MappedSegment> memory;
    SlotAllocator slots;
  };

  const std::string job_;
  const uint64_t max_bytes_;
  mutable absl::Mutex mu_;
  std::vector<Segment> segments_ ABSL_GUARDED_BY(mu_);
  uint64_t mapped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ard::shm
