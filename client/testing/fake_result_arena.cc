#include "client/testing/fake_result_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <iterator>

namespace ard::client::testing {

FakeResultArena::~FakeResultArena() {
  for (Segment& s : segments_) {
    ::munmap(s.map.base, s.map.bytes);
    ::close(s.fd);
  }
}

uint32_t FakeResultArena::AddSegment(uint64_t bytes) {
  Segment s;
  s.fd = ::memfd_create("ard-result", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  CheckSys(s.fd >= 0 && ::ftruncate(s.fd, static_cast<off_t>(bytes)) == 0, "result memfd");
  CheckSys(::fcntl(s.fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0, "seal result memfd");
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd, 0);
  CheckSys(base != MAP_FAILED, "mmap result segment");
  s.map = {static_cast<char*>(base), bytes};
  s.free[0] = bytes;
  segments_.push_back(std::move(s));
  return static_cast<uint32_t>(segments_.size() - 1);
}

bool FakeResultArena::Allocate(uint64_t bytes, Slot* out) {
  bytes = (bytes + wire::kSlotAlignment - 1) / wire::kSlotAlignment * wire::kSlotAlignment;
  for (size_t i = segments_.size(); i-- > 0;) {
    auto& free = segments_[i].free;
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (it->second < bytes) continue;
      *out = {static_cast<uint32_t>(i), it->first, bytes};
      uint64_t rest = it->second - bytes;
      free.erase(it);
      if (rest > 0) free[out->offset + bytes] = rest;
      return true;
    }
  }
  return false;
}

void FakeResultArena::Free(const Slot& slot) {
  std::memset(At(slot), 0xAB, slot.bytes);
  auto& free = segments_[slot.segment].free;
  auto it = free.emplace(slot.offset, slot.bytes).first;
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

}  // namespace ard::client::testing
