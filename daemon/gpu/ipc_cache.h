// The daemon's open CUDA IPC mappings and events, per (pid, device, handle bytes): a training
// process sends its staging arena and event pool handles once at registration; each is opened at
// most once and stays open until that process leaves (ReleaseProcess). A handle that another live
// process already registered is refused: a process may only hand the daemon memory it owns.
//
// Thread: the control loop registers and releases; mappings are shared_ptr so a job executor that
// still holds one keeps it valid until its current collective ends. Internally locked.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/gpu/device.h"

namespace ard::gpu {

class IpcCache {
 public:
  explicit IpcCache(Device& device) : device_(device) {}

  // The mapping of `handle` for process `pid` on `device`, opened on first use.
  absl::StatusOr<std::shared_ptr<Memory>> OpenMemory(uint32_t pid, int device,
                                                     const IpcHandle& handle);
  absl::StatusOr<std::shared_ptr<Event>> OpenEvent(uint32_t pid, int device,
                                                   const IpcHandle& handle);
  // Closes (drops the cache's reference to) everything process `pid` registered.
  void ReleaseProcess(uint32_t pid);

  size_t entries() const;

 private:
  using Key = std::tuple<uint32_t, int, IpcHandle>;
  absl::Status CheckOwner(uint32_t pid, const IpcHandle& handle) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Device& device_;  // Not owned.
  mutable absl::Mutex mu_;
  std::map<Key, std::shared_ptr<Memory>> memory_ ABSL_GUARDED_BY(mu_);
  std::map<Key, std::shared_ptr<Event>> events_ ABSL_GUARDED_BY(mu_);
  std::map<IpcHandle, uint32_t> owner_ ABSL_GUARDED_BY(mu_);  // handle -> registering pid
};

}  // namespace ard::gpu
