// TEST DOUBLE — not GPU support. A host-memory implementation of gpu::Device so CI can run the
// daemon's GPU orchestration without a GPU. Never linked into the shipped daemon (testonly).
//
// One HostWorld stands for a cluster; each HostDevice is one simulated process (a pid on a host
// name, with `device_count` GPUs). What it simulates, with the CUDA/NCCL rules it enforces:
// - Device memory is a memfd mapping; an IPC handle names the allocation, and OpenMemory maps the
//   same memfd again at another address. Opening a freed allocation's handle, a handle on the wrong
//   device, or one's own handle (CUDA refuses that too) fails with InvalidArgument. A copy that
//   touches a mapping whose exporter freed the allocation (or exited) is an illegal address: a
//   sticky error that poisons this process's context on that GPU (every later call fails).
// - Each Stream is a worker thread running its work in issue order; events follow
//   cudaEventRecord / cudaStreamWaitEvent ordering, and interprocess events share state. A stream
//   waiting on an event whose record never runs (the recorder's stream is stuck) waits forever.
// - Communicators are nonblocking as NCCL's: init, every collective and GroupEnd return
//   ncclInProgress-like (the work reaches its stream only after State() was polled, so work queued
//   before that runs first), Finalize completes once the rank's collectives ran. Ranks of one
//   UniqueId rendezvous per collective (same order on every rank). Two ranks on one (host, GPU)
//   are refused ("duplicate GPU"), a process holding several ranks must use GroupStart/End, Abort
//   frees the communicator, fails pending work and peers see an asynchronous error; a call from a
//   thread other than the one that created it is counted (thread_violations). FailCommunicator()
//   simulates a rank's process dying; FailNextCall() an NCCL refusal (ncclInvalidUsage).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "daemon/gpu/device.h"

namespace ard::gpu::testing {

struct CommGroup;
struct MappingTable;

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
  int aborted_communicators() const;
  int finalized_communicators() const;  // destroyed after a completed Finalize
  // Calls on a communicator from a thread other than the one that drives it.
  int thread_violations() const;
  // State() polls before an accepted call reaches its stream (>= 1; default 2).
  void set_in_progress_polls(int polls);

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
  std::string NcclVersion() const override { return nccl_version_; }
  absl::Status Lost() const override;
  // What Describe() and NcclVersion() report (tests of version agreement between hosts).
  void set_versions(std::string cuda, std::string nccl) {
    cuda_version_ = std::move(cuda);
    nccl_version_ = std::move(nccl);
  }
  absl::StatusOr<int> DeviceCount() override;
  absl::Status InitContexts() override;
  absl::StatusOr<std::unique_ptr<Memory>> Allocate(int device, size_t bytes) override;
  absl::StatusOr<std::unique_ptr<Memory>> AllocateHost(size_t bytes) override;
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
  absl::StatusOr<bool> Query(Stream& stream) override;
  absl::StatusOr<UniqueId> NewUniqueId() override;
  absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> InitCommunicators(
      const UniqueId& id, int size, const std::vector<CommRank>& local) override;
  absl::Status GroupStart() override;
  absl::Status GroupEnd() override;

  // Counters for tests.
  int memory_opens() const { return memory_opens_.load(); }
  int open_mappings() const { return open_mappings_->load(); }
  int group_ends() const { return group_ends_.load(); }
  int allocations() const { return allocations_.load(); }
  // Contexts a call other than InitContexts had to create (CUDA creates one at a GPU's first use).
  int lazy_contexts() const {
    absl::MutexLock lock(&mu_);
    return lazy_contexts_;
  }
  // Copies issued between two device ranges (own allocations or IPC mappings), and copies with a
  // side in host memory that AllocateHost did not give (pageable: CUDA stages and blocks them).
  int device_copies() const { return device_copies_.load(); }
  int pageable_copies() const { return pageable_copies_.load(); }
  // The next collective call on one of this process's communicators returns `status` (what NCCL
  // answers for a call it refuses: ncclInvalidUsage, ncclInvalidArgument).
  void FailNextCall(absl::Status status) {
    absl::MutexLock lock(&mu_);
    injected_ = std::move(status);
  }
  absl::Status TakeInjectedFailure() {
    absl::MutexLock lock(&mu_);
    absl::Status status = std::move(injected_);
    injected_ = absl::OkStatus();
    return status;
  }
  // The sticky error of `device`'s context (OK while healthy).
  absl::Status sticky(int device) const;
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

  // A copy's or collective's task: an illegal address when [p, p + bytes) lies in a mapping whose
  // allocation its exporter freed (the context of `device` is then poisoned).
  absl::Status CheckMapped(const void* p, size_t bytes, int device);
  // Issues `task` on `stream`. Used by communicators and tests.
  absl::Status Issue(Stream& stream, std::function<absl::Status()> task, bool collective);
  bool InGroup() const;
  // Inside a group: `comm` accepts `task` at GroupEnd.
  void Defer(Communicator* comm, Stream& stream, std::function<absl::Status()> task);

 private:
  // An invalid ordinal's error; else notes the device's context (created here unless it was).
  absl::Status CheckDevice(int device) const;
  void CountCopy(const void* dst, const void* src, size_t bytes);

  HostWorld& world_;
  const std::string host_;
  const uint32_t pid_;
  const int device_count_;
  std::atomic<int> memory_opens_{0};
  std::shared_ptr<std::atomic<int>> open_mappings_ = std::make_shared<std::atomic<int>>(0);
  std::atomic<int> group_ends_{0};
  std::atomic<int> allocations_{0};
  std::atomic<int> device_copies_{0};
  std::atomic<int> pageable_copies_{0};
  std::string cuda_version_ = "none";
  std::string nccl_version_ = "host-double";
  std::shared_ptr<MappingTable> mappings_;  // opened IPC mappings
  std::shared_ptr<MappingTable> own_;       // this process's device allocations
  std::shared_ptr<MappingTable> pinned_;    // AllocateHost's

  struct Deferred {
    Communicator* comm;
    Stream* stream;
    std::function<absl::Status()> task;
  };
  mutable absl::Mutex mu_;
  absl::Status injected_ ABSL_GUARDED_BY(mu_);
  std::map<int, absl::Status> sticky_ ABSL_GUARDED_BY(mu_);
  std::map<std::thread::id, int> group_depth_ ABSL_GUARDED_BY(mu_);
  std::map<std::thread::id, std::vector<Deferred>> deferred_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> calls_ ABSL_GUARDED_BY(mu_);
  mutable std::set<int> contexts_ ABSL_GUARDED_BY(mu_);
  mutable int lazy_contexts_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ard::gpu::testing
