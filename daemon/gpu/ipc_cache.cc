#include "daemon/gpu/ipc_cache.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace ard::gpu {

absl::Status IpcCache::CheckOwner(uint32_t pid, const IpcHandle& handle) {
  auto it = owner_.find(handle);
  if (it != owner_.end() && it->second != pid) {
    return absl::PermissionDeniedError(absl::StrCat("IPC handle was registered by process ",
                                                    it->second, "; pid ", pid, " does not own it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Memory>> IpcCache::OpenMemory(uint32_t pid, int device,
                                                             const IpcHandle& handle) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckOwner(pid, handle); !s.ok()) return s;
  Key key{pid, device, handle};
  auto it = memory_.find(key);
  if (it != memory_.end()) return it->second;
  auto opened = device_.OpenMemory(device, handle);
  if (!opened.ok()) {
    return absl::Status(opened.status().code(),
                        absl::StrCat("staging arena of pid ", pid, " on GPU ", device, ": ",
                                     opened.status().message()));
  }
  std::shared_ptr<Memory> memory = std::move(*opened);
  memory_.emplace(key, memory);
  owner_[handle] = pid;
  return memory;
}

absl::StatusOr<std::shared_ptr<Event>> IpcCache::OpenEvent(uint32_t pid, int device,
                                                           const IpcHandle& handle) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = CheckOwner(pid, handle); !s.ok()) return s;
  Key key{pid, device, handle};
  auto it = events_.find(key);
  if (it != events_.end()) return it->second;
  auto opened = device_.OpenEvent(device, handle);
  if (!opened.ok()) {
    return absl::Status(
        opened.status().code(),
        absl::StrCat("event of pid ", pid, " on GPU ", device, ": ", opened.status().message()));
  }
  std::shared_ptr<Event> event = std::move(*opened);
  events_.emplace(key, event);
  owner_[handle] = pid;
  return event;
}

void IpcCache::ReleaseProcess(uint32_t pid) {
  absl::MutexLock lock(&mu_);
  auto lower = [&](auto& map) {
    return map.lower_bound(Key{pid, std::numeric_limits<int>::min(), IpcHandle{}});
  };
  for (auto it = lower(memory_); it != memory_.end() && std::get<0>(it->first) == pid;) {
    it = memory_.erase(it);
  }
  for (auto it = lower(events_); it != events_.end() && std::get<0>(it->first) == pid;) {
    it = events_.erase(it);
  }
  for (auto it = owner_.begin(); it != owner_.end();) {
    it = it->second == pid ? owner_.erase(it) : std::next(it);
  }
}

size_t IpcCache::entries() const {
  absl::MutexLock lock(&mu_);
  return memory_.size() + events_.size();
}

}  // namespace ard::gpu
