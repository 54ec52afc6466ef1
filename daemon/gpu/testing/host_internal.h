// TEST DOUBLE internals shared by host_device.cc and host_communicator.cc (not a public header).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/gpu/device.h"
#include "daemon/gpu/testing/host_device.h"

namespace ard::gpu::testing {

// A stream: one worker thread running tasks in order. The first failed task's error is sticky.
class HostStream : public Stream {
 public:
  explicit HostStream(int device);
  ~HostStream() override;
  int device() const override { return device_; }
  void Push(std::function<absl::Status()> task);
  absl::Status Drain();  // waits until every pushed task has run
  // cudaStreamQuery: true when every pushed task has run; the sticky error otherwise.
  absl::StatusOr<bool> Idle();
  bool stopping() const { return stopping_.load(); }

 private:
  void Run();
  const int device_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<absl::Status()>> queue_;
  bool running_ = false;
  absl::Status error_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// Shared by an event and every IPC opening of it.
struct EventState {
  int device = 0;
  bool interprocess = false;
  uint64_t id = 0;
  uint32_t owner_pid = 0;
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;   // Records issued
  uint64_t completed = 0;  // Records reached on their stream
};

// A collective in flight on a communicator group: slot `seq` of every rank.
struct CollectiveSlot {
  int arrived = 0;
  int departed = 0;
  bool done = false;
  std::vector<const void*> sends;
  std::vector<std::vector<uint8_t>> results;  // per rank
};

struct CommGroup {
  int size = 0;
  std::mutex mu;
  std::condition_variable cv;
  int joined = 0;
  std::vector<bool> rank_taken;
  std::vector<std::string> gpu_of_rank;  // "host/device"
  absl::Status failure;                  // async error every rank sees
  std::map<uint64_t, CollectiveSlot> slots;
};

struct HostWorld::State {
  std::mutex mu;
  uint64_t next_id = 1;
  struct Region {
    int fd = -1;
    size_t bytes = 0;
    int device = 0;
    uint32_t owner_pid = 0;
  };
  std::map<uint64_t, Region> regions;                    // live allocations
  std::map<uint64_t, std::weak_ptr<EventState>> events;  // live interprocess events
  std::map<std::vector<uint8_t>, std::shared_ptr<CommGroup>> groups;
  std::atomic<int> live_comms{0};  // communicators not yet aborted or destroyed
  std::atomic<int> aborted_comms{0};
  std::atomic<int> finalized_comms{0};  // destroyed after a completed Finalize
  std::atomic<int> thread_violations{0};
  std::atomic<int> in_progress_polls{2};
};

// A process's open IPC mappings by address, to find the allocation a copy touches.
struct MappingTable {
  std::mutex mu;
  struct Entry {
    size_t bytes;
    uint64_t id;
  };
  std::map<uintptr_t, Entry> by_address;
  // The allocation id of the mapping holding [p, p + bytes), or 0.
  uint64_t Find(const void* p, size_t bytes);
};

// GroupEnd: the communicator accepts a call its group deferred (host_communicator.cc).
void AcceptDeferred(Communicator* comm, Stream& stream, std::function<absl::Status()> task);

}  // namespace ard::gpu::testing
