#include "daemon/shm/result_arena.h"

#include "absl/strings/str_cat.h"
#include "proto/local_wire.h"

namespace ard::shm {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

}  // namespace

absl::StatusOr<std::shared_ptr<ResultArena>> ResultArena::Create(std::string job,
                                                                 uint64_t first_segment_bytes,
                                                                 uint64_t max_bytes) {
  std::shared_ptr<ResultArena> arena(new ResultArena(std::move(job), max_bytes));
  absl::MutexLock lock(&arena->mu_);
  if (auto s = arena->AddSegment(std::min(first_segment_bytes, max_bytes)); !s.ok()) return s;
  return arena;
}

absl::Status ResultArena::AddSegment(uint64_t bytes) {
  if (segments_.size() >= wire::kMaxSegments) {
    return absl::ResourceExhaustedError(
        absl::StrCat("result arena of job ", job_, " has ", segments_.size(), " segments"));
  }
  auto memory = MappedSegment::CreateResultSegment(
      absl::StrCat("ard-result-", job_, "-", segments_.size()), bytes);
  if (!memory.ok()) return memory.status();
  segments_.push_back(Segment{*std::move(memory), SlotAllocator(bytes, wire::kSlotAlignment)});
  mapped_ += bytes;
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ResultSlot>> ResultArena::Allocate(uint64_t bytes,
                                                                  int* new_segment) {
  *new_segment = -1;
  absl::MutexLock lock(&mu_);
  uint32_t index = 0;
  std::optional<uint64_t> offset;
  for (; index < segments_.size() && !offset; ++index) {
    offset = segments_[index].slots.Allocate(bytes);
  }
  if (offset) {
    --index;
  } else {
    // Grow: double the last segment, at least the request rounded to 1 MiB, within the cap.
    const uint64_t want = std::max(segments_.back().memory->size() * 2,
                                   (bytes + wire::kSlotAlignment + kMiB - 1) / kMiB * kMiB);
    const uint64_t room = max_bytes_ > mapped_ ? max_bytes_ - mapped_ : 0;
    const uint64_t size = std::min(want, room);
    if (size < bytes + wire::kSlotAlignment) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "result arena of job ", job_, " is full: ", mapped_, " of ", max_bytes_,
          " bytes mapped, need ", bytes, " more (are results being released?)"));
    }
    if (auto s = AddSegment(size); !s.ok()) return s;
    index = segments_.size() - 1;
    offset = segments_[index].slots.Allocate(bytes);
    *new_segment = static_cast<int>(index);
  }
  auto self = shared_from_this();
  ResultSlot* slot = new ResultSlot{index, *offset, bytes,
                                    segments_[index].memory->data() + *offset};
  return std::shared_ptr<ResultSlot>(slot, [self](ResultSlot* s) {
    self->Free(s->segment, s->offset);
    delete s;
  });
}

void ResultArena::Free(uint32_t segment, uint64_t offset) {
  absl::MutexLock lock(&mu_);
  if (segment < segments_.size()) segments_[segment].slots.Free(offset);
}

std::shared_ptr<MappedSegment> ResultArena::segment(uint32_t index) const {
  absl::MutexLock lock(&mu_);
  return index < segments_.size() ? segments_[index].memory : nullptr;
}

uint64_t ResultArena::used_bytes() const {
  absl::MutexLock lock(&mu_);
  uint64_t used = 0;
  for (const Segment& s : segments_) used += s.slots.used_bytes();
  return used;
}

uint64_t ResultArena::mapped_bytes() const {
  absl::MutexLock lock(&mu_);
  return mapped_;
}

}  // namespace ard::shm
