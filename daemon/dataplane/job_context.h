// What a job's executor shares with the control loop: the job's ranks (its completion sink), its
// result arena, its counters and its failure state. Immutable after formation except the counters
// (atomics) and the failure (mutex). Any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/dataplane/completion_sink.h"
#include "daemon/shm/result_arena.h"

namespace ard::metrics {
class DaemonMetrics;
}  // namespace ard::metrics

namespace ard::timeline {
class Recorder;
}  // namespace ard::timeline

namespace ard::dataplane {

struct JobContext {
  std::string name;
  uint32_t id = 0;
  int size = 0;
  std::shared_ptr<CompletionSink> sink;  // this host's ranks (local::RankSessions)
  std::shared_ptr<shm::ResultArena> results;
  // Tells the control loop (thread-safe; from the executor thread) that the data plane failed
  // and the job cannot go on; the loop then fails the job (Fail below, ranks, other hosts).
  std::function<void(absl::Status)> report_failure;

  std::atomic<uint64_t> collectives_completed{0};
  std::atomic<uint64_t> bytes_reduced{0};        // input bytes of one rank, summed over tensors
  metrics::DaemonMetrics* metrics = nullptr;     // Not owned (the Daemon's); null: metrics off
  std::shared_ptr<timeline::Recorder> timeline;  // the job's recorder; null: none

  // The first failure wins; later calls are ignored. Returns true when this call failed the job.
  bool Fail(absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (!failure_.ok()) return false;
    failure_ = std::move(status);
    return true;
  }
  absl::Status failure() const {
    absl::MutexLock lock(&mu_);
    return failure_;
  }
  // Waits up to `timeout` for the job to fail (Fail() from another thread); returns the failure,
  // or OK when none came.
  absl::Status AwaitFailure(absl::Duration timeout) const {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](const absl::Status* f) { return !f->ok(); }, &failure_),
                         timeout);
    return failure_;
  }

 private:
  mutable absl::Mutex mu_;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ard::dataplane
