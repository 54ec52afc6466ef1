// TEST DOUBLE — not GPU support. A host-memory implementation of gpu::Device so CI can run the
// daemon's GPU orchestration without a GPU. Never linked into the shipped daemon (testonly).
//
// One HostWorld stands for a cluster; each HostDevice is one simulated process (a pid on a host
// name, with `device_count` GPUs). What it simulates, with the CUDA/NCCL rules it enforces:
// - Device memory is a memfd mapping; an IPC handle names the allocation, and OpenMemory maps the
//   same memfd again at another address. Opening a freed allocation's handle, a handle on the wrong
//   device, or one's own handle (CUDA refuses that too) fails with InvalidArgument.
// - Each Stream is a worker thread running its work in issue order; events follow
//   cudaEventRecord / cudaStreamWaitEvent ordering, and interprocess events share state.
// - Communicators: ranks of one UniqueId rendezvous per collective (same order on every rank). Two
//   ranks on one (host, GPU) are refused ("duplicate GPU"), a process holding several ranks must
//   use GroupStart/End (work issued inside a group starts at GroupEnd), Abort fails pending work
//   and peers see an asynchronous error. FailRank() simulates a rank's process dying.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/gpu/device.h"

namespace ard::gpu::testing {

struct CommGroup;

class HostWorld {
 public:
  HostWorld();
  ~HostWorld();
  // Makes every rank of the communicator `id` see `status` as its asynchronous error (a peer's
  // process died); their pending collectives fail.
  void FailCommunicator(const UniqueId& id, absl::Status status);

  // Communicators neither aborted nor destroyed. Abort frees a communicator's state at once, as
  // ncclCommAbort does, even while its Communicator object lives on.
  int live_communicators() const;

  struct State;  // host_internal.h
  State* state() { return state_.get(); }

 private:
  std::unique_ptr<State> state_;
};

class HostDevice : public Device {
 public:
  HostDevice(HostWorld& world, std::string host, uint32_t pid, int device_count);
  ~HostDevice() override;

  std::string Describe() const override;
  absl::StatusOr<int> DeviceCount() override;
  absl::StatusOr<std::unique_ptr<Memory>> Allocate(int device, size_t bytes) override;
  absl::StatusOr<IpcHandle> ExportMemory(const Memory& memory) override;
  absl::StatusOr<std::unique_ptr<Memory>> OpenMemory(int device, const IpcHandle& handle) override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent(int device, bool interprocess) override;
  absl::StatusOr<IpcHandle> ExportEvent(const Event& event) override;
  absl::StatusOr<std::unique_ptr<Event>> OpenEvent(int device, const IpcHandle& handle) override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream(int device) override;
  absl::Status Record(Event& event, Stream& stream) override;
  absl::Status Wait(Stream& stream, Event& event) override;
  absl::Status CopyAsync(void* dst, const void* src, size_t bytes, Stream& stream) override;
  absl::Status MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) override;
  absl::Status Synchronize(Stream& stream) override;
  absl::StatusOr<UniqueId> NewUniqueId() override;
  absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> InitCommunicators(
      const UniqueId& id, int size, const std::vector<CommRank>& local,
      absl::Duration timeout) override;
  absl::Status GroupStart() override;
  absl::Status GroupEnd() override;

  // Counters for tests.
  int memory_opens() const { return memory_opens_.load(); }
  int open_mappings() const { return open_mappings_->load(); }
  int group_ends() const { return group_ends_.load(); }
  // Collectives issued through this device's communicators, by kind: "allreduce", "broadcast",
  // "allgather", "reducescatter".
  int collective_calls(const std::string& kind) const {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(kind);
    return it == calls_.end() ? 0 : it->second;
  }
  void CountCall(const std::string& kind) {
    absl::MutexLock lock(&mu_);
    ++calls_[kind];
  }
  uint32_t pid() const { return pid_; }
  HostWorld& world() { return world_; }

  // Issues `task` on `stream` (or defers it to GroupEnd inside a group). Used by communicators.
  absl::Status Issue(Stream& stream, std::function<absl::Status()> task, bool collective);
  bool InGroup() const;

 private:
  absl::Status CheckDevice(int device) const;

  HostWorld& world_;
  const std::string host_;
  const uint32_t pid_;
  const int device_count_;
  std::atomic<int> memory_opens_{0};
  std::shared_ptr<std::atomic<int>> open_mappings_ = std::make_shared<std::atomic<int>>(0);
  std::atomic<int> group_ends_{0};

  struct Deferred {
    Stream* stream;
    std::function<absl::Status()> task;
  };
  mutable absl::Mutex mu_;
  std::map<std::thread::id, int> group_depth_ ABSL_GUARDED_BY(mu_);
  std::map<std::thread::id, std::vector<Deferred>> deferred_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ard::gpu::testing
