// The fake daemon's result arena (test-only): memfd segments the fake writes results into and
// clients map read-only, first fit with coalescing, newest segment first. A freed slot is
// poisoned with 0xAB so a client reading a result after RELEASE would see garbage.
// Not synchronised: the fake daemon calls it under its own lock.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "client/testing/fake_socket.h"

namespace ard::client::testing {

class FakeResultArena {
 public:
  struct Slot {
    uint32_t segment = 0;
    uint64_t offset = 0;
    uint64_t bytes = 0;
  };

  FakeResultArena() = default;
  ~FakeResultArena();
  FakeResultArena(const FakeResultArena&) = delete;
  FakeResultArena& operator=(const FakeResultArena&) = delete;

  uint32_t AddSegment(uint64_t bytes);  // returns its index
  bool Allocate(uint64_t bytes, Slot* out);
  void Free(const Slot& slot);  // poisons, then returns the slot

  char* At(const Slot& slot) { return segments_[slot.segment].map.base + slot.offset; }
  int fd(uint32_t index) const { return segments_[index].fd; }  // read-write; reopen to share
  uint64_t segment_bytes(uint32_t index) const { return segments_[index].map.bytes; }

 private:
  struct Segment {
    int fd = -1;
    Mapped map;
    std::map<uint64_t, uint64_t> free;  // offset -> bytes
  };
  std::vector<Segment> segments_;
};

}  // namespace ard::client::testing
