// The input arena: shared memory the client copies tensors into before SUBMIT, and the daemon
// reads (DESIGN.md "Shared memory"). It is a list of sealed memfd segments (index 0 travels with
// HELLO, later ones with ADD_SEGMENT), each carved into kSlotAlignment-aligned slots by first fit
// with a coalescing free list.
//
// Lifecycle:
//   1. Create() makes and maps segment 0 (sparse: pages cost memory only once written).
//   2. Allocate() from any thread; when no segment has room it adds one of max(2x the last, the
//      request) bytes, capped by max_bytes in total and wire::kMaxSegments in count, and calls
//      `publish` (which sends ADD_SEGMENT) BEFORE the segment can be handed out, so no SUBMIT
//      naming it can overtake its ADD_SEGMENT on the socket.
//   3. Free() when the daemon no longer reads the slot (its COMPLETE or ERROR arrived).
//   4. Destruction unmaps and closes everything (the daemon keeps its own mappings).
// Thread-safe. grow_mu_ serialises growth (dense indexes, one ADD_SEGMENT at a time) and is held
// across `publish`; mu_ guards the free lists and is never held across a system call that can
// block, so Free() (on the receiver thread) never waits for a full socket.
// Lock order: grow_mu_, then mu_; grow_mu_, then the connection's send lock.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "client/shm.h"
#include "client/status.h"

namespace ard::client {

class InputArena {
 public:
  struct Slot {
    uint32_t segment = 0;
    uint64_t offset = 0;
    uint64_t bytes = 0;     // reserved bytes (a multiple of kSlotAlignment); 0: no slot
    char* data = nullptr;   // writable view of the slot in this process
  };

  // Announces a new segment to the daemon; called with the arena lock held. A failure aborts the
  // growth (the segment is discarded) and is returned by Allocate().
  using PublishFn = std::function<Status(uint32_t index, int fd, uint64_t bytes)>;

  // first_segment_bytes and max_bytes as resolved in ClientConfig (page multiples, first <= max).
  static Status Create(uint64_t first_segment_bytes, uint64_t max_bytes, PublishFn publish,
                       std::unique_ptr<InputArena>* out);

  InputArena(const InputArena&) = delete;
  InputArena& operator=(const InputArena&) = delete;

  // The memfd and size of segment 0, for HELLO (the fd stays owned by the arena).
  int first_segment_fd() const { return first_fd_; }
  uint64_t first_segment_bytes() const { return first_bytes_; }

  // Reserves a slot of at least `bytes` (1..wire::kMaxTensorBytes). ResourceExhausted when the
  // cap or the segment count is reached, with a message saying which and how much is in use.
  Status Allocate(uint64_t bytes, Slot* out);

  // Returns a slot from Allocate(); a slot with bytes == 0 is ignored.
  void Free(const Slot& slot);

  // For tests and diagnostics.
  uint32_t segment_count() const;
  uint64_t total_bytes() const;
  uint64_t free_bytes() const;
  size_t free_block_count() const;

 private:
  struct Segment {
    UniqueFd fd;
    Mapping mapping;
    std::map<uint64_t, uint64_t> free;  // offset -> bytes, disjoint, never adjacent
  };

  InputArena(uint64_t max_bytes, PublishFn publish);
  // Makes and maps a segment of `bytes` (no lock needed: it is not shared yet).
  static Status MakeSegment(uint64_t bytes, std::unique_ptr<Segment>* out);
  void InsertSegment(std::unique_ptr<Segment> segment);  // requires mu_
  bool TakeFirstFit(uint64_t bytes, Slot* out);           // requires mu_
  // Size of the next segment for a request of `bytes`, or ResourceExhausted; requires mu_.
  Status NextSegmentBytes(uint64_t bytes, uint64_t* out) const;

  const uint64_t max_bytes_;
  const PublishFn publish_;
  int first_fd_ = -1;         // set once by Create()
  uint64_t first_bytes_ = 0;  // set once by Create()
  std::mutex grow_mu_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Segment>> segments_;  // guarded by mu_; appended under grow_mu_
  uint64_t total_bytes_ = 0;                        // guarded by mu_
  uint64_t free_bytes_ = 0;                         // guarded by mu_
};

}  // namespace ard::client
