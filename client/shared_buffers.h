// Shared-memory tensors (ard_alloc / ard_free): input-arena slots handed to the caller, who builds
// a tensor in place and submits it without a copy; the daemon reads it where it lies (DESIGN.md
// "Shared memory", "Tensors built in shared memory").
//
// Lifecycle of a buffer:
//   1. Allocate() takes a slot from the input arena (growing it as ard_submit would).
//   2. BeginUse() for every submit whose input lies in the buffer (at a kSlotAlignment offset),
//      EndUse() when the daemon no longer reads it (COMPLETE/ERROR, a withdrawn SUBMIT).
//   3. Free() by the caller; the slot goes back to the arena after the last use ends.
// A submit's record holds the slot BeginUse() returned: bytes 0 (InputArena::Free ignores it) and
// data = the buffer's start, by which EndUse() finds the buffer.
// Thread-safe (one mutex, never held across a call into the arena that can block).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

#include "client/arena.h"
#include "client/status.h"

namespace ard::client {

class SharedBuffers {
 public:
  explicit SharedBuffers(InputArena& arena) : arena_(arena) {}
  SharedBuffers(const SharedBuffers&) = delete;
  SharedBuffers& operator=(const SharedBuffers&) = delete;

  // A new buffer of at least `bytes` (1..kMaxTensorBytes), 64-byte aligned, zero-filled the first
  // time its pages are used; errors as InputArena::Allocate.
  Status Allocate(uint64_t bytes, void** data);

  // Gives a buffer back (at once, or after the last submit reading it completes).
  // InvalidArgument when `data` is not the start of a live buffer.
  Status Free(void* data);

  // When [data, data + bytes) lies inside a live buffer at a kSlotAlignment-aligned offset:
  // counts a use and describes the input's place in the arena in `slot` (see above); else false
  // (the caller copies the input into a slot of its own, as for any other memory).
  bool BeginUse(const void* data, uint64_t bytes, InputArena::Slot* slot);

  // Ends a use begun by BeginUse(); false when `slot` is not a buffer's (an ordinary slot).
  bool EndUse(const InputArena::Slot& slot);

  size_t live_count() const;  // for tests: buffers allocated and not yet returned to the arena

 private:
  struct Buffer {
    InputArena::Slot slot;
    int uses = 0;
    bool freed = false;
  };

  InputArena& arena_;  // Not owned.
  mutable std::mutex mu_;
  std::map<const char*, Buffer> buffers_;  // by start; guarded by mu_
};

}  // namespace ard::client
