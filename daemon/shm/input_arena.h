// A client's input arena as the daemon sees it: the memfd segments that process passed (HELLO's
// first, then ADD_SEGMENT), mapped read-only, and the bounds check of every tensor location it
// names. Owned by the client's session on the control loop. Tensor references keep their segment
// mapped (shared_ptr) until the executor has read them, even if the process exits meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/common/tensor_bytes.h"
#include "daemon/shm/mapped_segment.h"

namespace ard::shm {

class InputArena {
 public:
  explicit InputArena(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // Maps the segment with the next index (takes ownership of `fd`).
  absl::Status AddSegment(uint32_t index, int fd, uint64_t bytes);
  // The bytes at {segment, offset, bytes}, or InvalidArgument when outside the arena.
  absl::StatusOr<TensorBytes> Resolve(uint32_t segment, uint64_t offset, uint64_t bytes) const;

  uint64_t mapped_bytes() const { return mapped_; }

 private:
  const uint64_t max_bytes_;
  uint64_t mapped_ = 0;
  std::vector<std::shared_ptr<const MappedSegment>> segments_;
};

}  // namespace ard::shm
