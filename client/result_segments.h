// The job's result arena as this client sees it: the daemon's result segments, mapped read-only
// (segment 0 arrives with WELCOME, later ones with RESULT_SEGMENT), and bounds-checked lookup of a
// COMPLETE's {segment, offset, bytes}.
// Threads: filled by the creating thread, then only by the receiver thread; destroyed after the
// receiver thread is joined. Not synchronised.
#pragma once

#include <cstdint>

#include "proto/local_wire.h"
#include "client/shm.h"
#include "client/status.h"

namespace ard::client {

class ResultSegments {
 public:
  // Maps `bytes` of `fd` read-only (MAP_SHARED) at `index`; the fd is closed afterwards. Internal
  // for an index out of range or already mapped, or a file shorter than `bytes`.
  Status Map(uint32_t index, UniqueFd fd, uint64_t bytes);

  // Points *data at [offset, offset + bytes) of a mapped segment; Internal when out of bounds.
  Status Locate(uint32_t segment, uint64_t offset, uint64_t bytes, const void** data) const;

 private:
  Mapping segments_[wire::kMaxSegments];
};

}  // namespace ard::client
