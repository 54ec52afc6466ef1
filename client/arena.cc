#include "client/arena.h"

#include <algorithm>
#include <utility>

#include "proto/local_wire.h"

namespace ard::client {
namespace {

constexpr uint64_t kPageBytes = 4096;

uint64_t RoundUp(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

InputArena::InputArena(uint64_t max_bytes, PublishFn publish)
    : max_bytes_(max_bytes), publish_(std::move(publish)) {}

Status InputArena::Create(uint64_t first_segment_bytes, uint64_t max_bytes, PublishFn publish,
                          std::unique_ptr<InputArena>* out) {
  if (first_segment_bytes == 0 || first_segment_bytes > max_bytes) {
    return InvalidArgument("first arena segment of " + std::to_string(first_segment_bytes) +
                           " bytes does not fit the cap of " + std::to_string(max_bytes));
  }
  std::unique_ptr<InputArena> arena(new InputArena(max_bytes, std::move(publish)));
  std::unique_ptr<Segment> segment;
  ARD_CLIENT_RETURN_IF_ERROR(MakeSegment(first_segment_bytes, &segment));
  arena->first_fd_ = segment->fd.get();
  arena->first_bytes_ = first_segment_bytes;
  {
    std::lock_guard<std::mutex> lock(arena->mu_);
    arena->InsertSegment(std::move(segment));
  }
  *out = std::move(arena);
  return OkStatus();
}

Status InputArena::MakeSegment(uint64_t bytes, std::unique_ptr<Segment>* out) {
  auto segment = std::make_unique<Segment>();
  ARD_CLIENT_RETURN_IF_ERROR(CreateSealedMemfd("ard-input", bytes, &segment->fd));
  ARD_CLIENT_RETURN_IF_ERROR(
      Mapping::Map(segment->fd.get(), bytes, /*writable=*/true, &segment->mapping));
  segment->free.emplace(0, bytes);
  *out = std::move(segment);
  return OkStatus();
}

void InputArena::InsertSegment(std::unique_ptr<Segment> segment) {
  total_bytes_ += segment->mapping.size();
  free_bytes_ += segment->mapping.size();
  segments_.push_back(std::move(segment));
}

bool InputArena::TakeFirstFit(uint64_t bytes, Slot* out) {
  for (uint32_t index = 0; index < segments_.size(); ++index) {
    Segment& segment = *segments_[index];
    for (auto it = segment.free.begin(); it != segment.free.end(); ++it) {
      if (it->second < bytes) continue;
      uint64_t offset = it->first;
      uint64_t rest = it->second - bytes;
      segment.free.erase(it);
      if (rest > 0) segment.free.emplace(offset + bytes, rest);
      free_bytes_ -= bytes;
      *out = Slot{index, offset, bytes, segment.mapping.data() + offset};
      return true;
    }
  }
  return false;
}

Status InputArena::NextSegmentBytes(uint64_t bytes, uint64_t* out) const {
  uint64_t in_use = total_bytes_ - free_bytes_;
  auto exhausted = [&](const std::string& why) {
    return ResourceExhausted("input arena full: a " + std::to_string(bytes) +
                             "-byte tensor does not fit (" + why + "; " + std::to_string(in_use) +
                             " bytes held by requests in flight)");
  };
  if (segments_.size() >= wire::kMaxSegments) {
    return exhausted("all " + std::to_string(wire::kMaxSegments) + " segments are in use");
  }
  uint64_t room = (max_bytes_ - total_bytes_) / kPageBytes * kPageBytes;
  if (room < bytes) {
    return exhausted("cap of " + std::to_string(max_bytes_) +
                     " bytes, ALLREDUCED_ARENA_MAX_BYTES, with " + std::to_string(total_bytes_) +
                     " bytes mapped");
  }
  uint64_t want = std::max(2 * segments_.back()->mapping.size(), RoundUp(bytes, kPageBytes));
  *out = std::min(want, room);
  return OkStatus();
}

Status InputArena::Allocate(uint64_t bytes, Slot* out) {
  if (bytes == 0 || bytes > wire::kMaxTensorBytes) {
    return InvalidArgument("arena slot of " + std::to_string(bytes) + " bytes requested");
  }
  uint64_t rounded = RoundUp(bytes, wire::kSlotAlignment);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (TakeFirstFit(rounded, out)) return OkStatus();
  }
  std::lock_guard<std::mutex> grow_lock(grow_mu_);
  uint64_t segment_bytes = 0;
  uint32_t index = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (TakeFirstFit(rounded, out)) return OkStatus();  // freed or grown meanwhile
    ARD_CLIENT_RETURN_IF_ERROR(NextSegmentBytes(rounded, &segment_bytes));
    index = static_cast<uint32_t>(segments_.size());  // stable: only growth appends
  }
  std::unique_ptr<Segment> segment;
  ARD_CLIENT_RETURN_IF_ERROR(MakeSegment(segment_bytes, &segment));
  ARD_CLIENT_RETURN_IF_ERROR(publish_(index, segment->fd.get(), segment_bytes));
  std::lock_guard<std::mutex> lock(mu_);
  InsertSegment(std::move(segment));
  if (TakeFirstFit(rounded, out)) return OkStatus();
  return Internal("a new arena segment did not fit the request that created it");
}

void InputArena::Free(const Slot& slot) {
  if (slot.bytes == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (slot.segment >= segments_.size()) return;
  auto& free = segments_[slot.segment]->free;
  auto [it, inserted] = free.emplace(slot.offset, slot.bytes);
  if (!inserted) return;  // double free: keep the list consistent
  free_bytes_ += slot.bytes;
  auto next = std::next(it);
  if (next != free.end() && it->first + it->second == next->first) {
    it->second += next->second;
    free.erase(next);
  }
  if (it != free.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second == it->first) {
      prev->second += it->second;
      free.erase(it);
    }
  }
}

uint32_t InputArena::segment_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<uint32_t>(segments_.size());
}

uint64_t InputArena::total_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_bytes_;
}

uint64_t InputArena::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_bytes_;
}

size_t InputArena::free_block_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t count = 0;
  for (const auto& segment : segments_) count += segment->free.size();
  return count;
}

}  // namespace ard::client
