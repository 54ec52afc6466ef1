#include "daemon/shm/input_arena.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "proto/local_wire.h"

namespace ard::shm {

absl::Status InputArena::AddSegment(uint32_t index, int fd, uint64_t bytes) {
  if (index != segments_.size()) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("arena segment index ", index, ", expected ", segments_.size()));
  }
  if (segments_.size() >= wire::kMaxSegments) {
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("arena already has the maximum of ", wire::kMaxSegments, " segments"));
  }
  if (bytes > max_bytes_ || mapped_ + bytes > max_bytes_) {
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("arena would exceed ", max_bytes_,
                                                     " bytes per process (has ", mapped_, ")"));
  }
  auto segment = MappedSegment::MapClientSegment(fd, bytes);
  if (!segment.ok()) return segment.status();
  segments_.push_back(*std::move(segment));
  mapped_ += bytes;
  return absl::OkStatus();
}

absl::StatusOr<TensorBytes> InputArena::Resolve(uint32_t segment, uint64_t offset,
                                                uint64_t bytes) const {
  if (bytes == 0) return TensorBytes{};
  if (segment >= segments_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("input segment ", segment, " does not exist (",
                                                   segments_.size(), " registered)"));
  }
  const auto& s = segments_[segment];
  if (offset > s->size() || bytes > s->size() - offset) {
    return absl::InvalidArgumentError(absl::StrCat("input [", offset, ", +", bytes,
                                                   ") lies outside segment ", segment, " of ",
                                                   s->size(), " bytes"));
  }
  return TensorBytes{s, s->data() + offset, bytes};
}

}  // namespace ard::shm
