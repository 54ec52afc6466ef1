#include "client/shared_buffers.h"

#include <string>

namespace ard::client {

Status SharedBuffers::Allocate(uint64_t bytes, void** data) {
  InputArena::Slot slot;
  ARD_CLIENT_RETURN_IF_ERROR(arena_.Allocate(bytes, &slot));
  std::lock_guard<std::mutex> lock(mu_);
  buffers_[slot.data] = Buffer{slot};
  *data = slot.data;
  return OkStatus();
}

Status SharedBuffers::Free(void* data) {
  InputArena::Slot back;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = buffers_.find(static_cast<const char*>(data));
    if (it == buffers_.end() || it->second.freed) {
      return InvalidArgument("ard_free: not a buffer from ard_alloc (or freed already)");
    }
    if (it->second.uses > 0) {
      it->second.freed = true;  // the last EndUse returns it
      return OkStatus();
    }
    back = it->second.slot;
    buffers_.erase(it);
  }
  arena_.Free(back);
  return OkStatus();
}

bool SharedBuffers::BeginUse(const void* data, uint64_t bytes, InputArena::Slot* slot) {
  const char* p = static_cast<const char*>(data);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = buffers_.upper_bound(p);
  if (it == buffers_.begin()) return false;
  --it;
  Buffer& buffer = it->second;
  const uint64_t at = static_cast<uint64_t>(p - it->first);
  if (buffer.freed || at >= buffer.slot.bytes || bytes > buffer.slot.bytes - at ||
      at % wire::kSlotAlignment != 0) {
    return false;
  }
  ++buffer.uses;
  *slot = InputArena::Slot{buffer.slot.segment, buffer.slot.offset + at, 0, buffer.slot.data};
  return true;
}

bool SharedBuffers::EndUse(const InputArena::Slot& slot) {
  if (slot.bytes != 0 || slot.data == nullptr) return false;
  InputArena::Slot back;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = buffers_.find(slot.data);
    if (it == buffers_.end()) return false;
    if (--it->second.uses > 0 || !it->second.freed) return true;
    back = it->second.slot;
    buffers_.erase(it);
  }
  arena_.Free(back);
  return true;
}

size_t SharedBuffers::live_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buffers_.size();
}

}  // namespace ard::client
