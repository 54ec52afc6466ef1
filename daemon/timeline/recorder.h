// One job's timeline recorder on this host (docs/operator-guide.md "Timeline"): a bounded ring of
// timestamped marks (a rank submitted a tensor, this host's ranks all had it, the negotiator
// committed a group, the executor started it, the cross-host transfer began and ended, the results
// went out) from which the CLI's trace writer (ctl/timeline_trace.h) builds each tensor's phases.
// Off unless someone records: then Record() is one relaxed atomic load.
//
// Thread: any (the control loop records submits, the executor thread records the rest); the ring
// is guarded by a mutex.
// Lifecycle: 1. made off by the Hub, shared by the job (and its executor) and the Hub; 2. Start()
// clears the ring and records until Stop() or the deadline; 3. Stop() hands the marks back and
// turns it off. The oldest marks are overwritten once the ring is full (counted in `dropped`).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ard::timeline {

// What happened. Per rank: kSubmit. Per tensor on this host: kReady. Per fused group (one
// committed response; `group` numbers them on this host in committed order): the rest.
enum class Mark : uint8_t {
  kSubmit = 1,         // rank `rank` submitted `tensor`
  kReady = 2,          // every rank of this host has submitted `tensor`: negotiation begins
  kCommit = 3,         // `tensor` was committed in group `group` (one mark per tensor)
  kExecStart = 4,      // the executor started group `group` (local reduce first)
  kTransferStart = 5,  // group `group`'s cross-host transfer began
  kTransferEnd = 6,    // ... and ended
  kComplete = 7,       // group `group`'s results are in the result arena, every rank told
  // Group `group` was carried by the steady state's readiness round that agreed it: its data
  // crossed hosts in that round (during negotiation), so it has no local reduce or transfer of
  // its own; the executor only writes its results (recorded before kComplete).
  kCarried = 8,
};

struct Event {
  int64_t time_us = 0;  // this host's clock, microseconds since the Unix epoch
  Mark mark = Mark::kSubmit;
  int32_t rank = -1;   // kSubmit only
  uint64_t group = 0;  // kCommit and later
  std::string tensor;  // kSubmit, kReady, kCommit
};

struct Recording {
  std::vector<Event> events;  // in recording order
  uint64_t dropped = 0;       // overwritten because the ring was full
};

class Recorder {
 public:
  explicit Recorder(size_t capacity) : capacity_(capacity) {}

  bool on() const { return on_.load(std::memory_order_relaxed); }
  // Cheap when off (no clock read); past the deadline it turns itself off.
  void Record(Mark mark, int32_t rank, uint64_t group, std::string_view tensor) {
    if (on()) RecordOn(mark, rank, group, tensor, absl::Now());
  }
  // The same with a time the caller already has.
  void RecordAt(Mark mark, int32_t rank, uint64_t group, std::string_view tensor, absl::Time at) {
    if (on()) RecordOn(mark, rank, group, tensor, at);
  }
  // Clears the ring and records until Stop() or `until`.
  void Start(absl::Time until);
  // Turns it off and returns what it recorded (empty when it was not started).
  Recording Stop();

 private:
  void RecordOn(Mark mark, int32_t rank, uint64_t group, std::string_view tensor, absl::Time now);

  const size_t capacity_;
  std::atomic<bool> on_{false};
  absl::Mutex mu_;
  absl::Time until_ ABSL_GUARDED_BY(mu_);
  std::vector<Event> ring_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;  // where the next mark goes once the ring is full
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ard::timeline
