// This daemon's timeline recorders, one per job name (docs/operator-guide.md "Timeline"). A
// recording is started by job name, possibly before this host's part of the job exists (a job made
// later picks up the armed recorder), and stopped by name, which hands back the marks.
//
// Thread: the control loop only (the recorders themselves are thread-safe).
// Lifecycle: owned by the Daemon; Jobs take ForJob(name) when they are made and keep it for their
// life; a recorder nobody records into and no job holds is dropped at the next Start/Stop.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/timeline/recorder.h"

namespace ard::timeline {

class Hub {
 public:
  // `capacity`: marks kept per job recording; `max_duration`: a recording nobody stops ends then.
  Hub(size_t capacity, absl::Duration max_duration)
      : capacity_(capacity), max_duration_(max_duration) {}

  // The job's recorder (made off when there is none).
  std::shared_ptr<Recorder> ForJob(const std::string& job);
  // Starts (or restarts, clearing it) the job's recording for `duration` (zero or more than the
  // maximum: the maximum). Returns how long it will record at most.
  absl::Duration Start(const std::string& job, absl::Duration duration, absl::Time now);
  // Stops it and returns its marks; NotFound when it was never started.
  absl::StatusOr<Recording> Stop(const std::string& job);

 private:
  void DropIdle();

  const size_t capacity_;
  const absl::Duration max_duration_;
  std::map<std::string, std::shared_ptr<Recorder>> recorders_;
  std::map<std::string, bool> started_;  // by job: Start() was called since the last Stop()
};

}  // namespace ard::timeline
