// TEST HELPER: a simulated training process on the host test double — a staging arena and an
// interprocess event pool on one GPU, and its "framework" stream — plus a two-host exchange for
// hierarchical mode. Tests only.
#pragma once

#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "daemon/collectives/reduce_kernels.h"
#include "daemon/gpu/gpu_job.h"
#include "daemon/gpu/testing/host_device.h"

namespace ard::gpu::testing {

class FakeProcess {
 public:
  FakeProcess(HostWorld& world, const std::string& host, uint32_t pid, int devices, int device,
              int rank, size_t arena_bytes = 1 << 16, int events = 4)
      : dev_(world, host, pid, devices), device_(device), rank_(rank) {
    arena_ = *dev_.Allocate(device, arena_bytes);
    for (int i = 0; i < events; ++i) events_.push_back(*dev_.CreateEvent(device, true));
    stream_ = *dev_.CreateStream(device);
  }

  // A process that exits normally lets its stream's work finish (so its records complete).
  ~FakeProcess() {
    Resume();
    static_cast<void>(dev_.Synchronize(*stream_));
  }

  // The framework's stream is stuck (a kernel that never ends) until Resume(): nothing it records
  // afterwards completes, so a daemon stream waiting on that event waits as long.
  void Stall() {
    std::lock_guard<std::mutex> lock(stall_->mu);
    stall_->stalled = true;
    static_cast<void>(dev_.Issue(
        *stream_,
        [stall = stall_] {
          std::unique_lock<std::mutex> lock(stall->mu);
          stall->cv.wait(lock, [&] { return !stall->stalled; });
          return absl::OkStatus();
        },
        false));
  }
  void Resume() {
    std::lock_guard<std::mutex> lock(stall_->mu);
    stall_->stalled = false;
    stall_->cv.notify_all();
  }

  GpuRegistration Registration() {
    GpuRegistration reg;
    reg.rank = rank_;
    reg.pid = dev_.pid();
    reg.device = device_;
    reg.arena = *dev_.ExportMemory(*arena_);
    reg.arena_bytes = arena_->size();
    for (auto& e : events_) reg.events.push_back(*dev_.ExportEvent(*e));
    return reg;
  }

  // Copies `values` into the arena at `offset` on the framework stream, then records `event`.
  template <typename T>
  void Submit(uint64_t offset, const std::vector<T>& values, uint32_t event) {
    staged_.push_back(std::vector<char>(
        reinterpret_cast<const char*>(values.data()),
        reinterpret_cast<const char*>(values.data()) + values.size() * sizeof(T)));
    static_cast<void>(dev_.CopyAsync(static_cast<char*>(arena_->data()) + offset,
                                     staged_.back().data(), staged_.back().size(), *stream_));
    static_cast<void>(dev_.Record(*events_[event], *stream_));
  }

  // On COMPLETE: wait for the daemon's record of `event`, then read the result.
  template <typename T>
  std::vector<T> Result(uint64_t offset, size_t count, uint32_t event) {
    std::vector<T> out(count);
    static_cast<void>(dev_.Wait(*stream_, *events_[event]));
    static_cast<void>(dev_.CopyAsync(out.data(), static_cast<char*>(arena_->data()) + offset,
                                     count * sizeof(T), *stream_));
    static_cast<void>(dev_.Synchronize(*stream_));
    return out;
  }

  HostDevice& device() { return dev_; }
  Stream& stream() { return *stream_; }
  void FreeArena() { arena_.reset(); }
  const void* arena_data() const { return arena_->data(); }

 private:
  HostDevice dev_;
  int device_;
  int rank_;
  std::unique_ptr<Memory> arena_;
  std::vector<std::unique_ptr<Event>> events_;
  std::unique_ptr<Stream> stream_;
  std::vector<std::vector<char>> staged_;
  struct StallState {
    std::mutex mu;
    std::condition_variable cv;
    bool stalled = false;
  };
  std::shared_ptr<StallState> stall_ = std::make_shared<StallState>();
};

// Hierarchical mode's host exchange between two simulated hosts (threads): an allreduce of host
// buffers, the TCP data plane's role.
class TwoHostExchange {
 public:
  CrossHostReduce For(int host) {
    return [this, host](void* buf, size_t count, wire::DataType dtype, wire::ReduceOp op) {
      size_t bytes = count * wire::DataTypeSize(static_cast<uint32_t>(dtype));
      std::unique_lock<std::mutex> lock(mu_);
      uint64_t round = round_;
      bufs_[host] = buf;
      if (++arrived_ == 2) {
        std::vector<char> sum(static_cast<char*>(bufs_[0]), static_cast<char*>(bufs_[0]) + bytes);
        collectives::ReduceInto(sum.data(), bufs_[1], count, dtype, op);
        std::memcpy(bufs_[0], sum.data(), bytes);
        std::memcpy(bufs_[1], sum.data(), bytes);
        arrived_ = 0;
        ++round_;
        calls_ += 1;
        cv_.notify_all();
      } else {
        cv_.wait(lock, [&] { return round_ != round; });
      }
      return absl::OkStatus();
    };
  }
  int calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  void* bufs_[2] = {nullptr, nullptr};
  int arrived_ = 0;
  uint64_t round_ = 0;
  int calls_ = 0;
};

}  // namespace ard::gpu::testing
