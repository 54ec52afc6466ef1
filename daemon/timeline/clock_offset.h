// A follower's estimate of the coordinator's clock minus its own, from heartbeat round trips
// (NTP-style: the coordinator stamped its clock while the call was in flight, so it read
// `offset = coordinator_time - (sent + received) / 2` give or take half the round trip). Keeps the
// sample with the shortest round trip among the last few (the tightest bound; old samples age
// out so a drifting clock is followed). Pure.
//
// Thread: the control loop (owned by the ClusterAgent).
#pragma once

#include <cstdint>
#include <deque>

#include "absl/time/time.h"

namespace ard::timeline {

class ClockOffset {
 public:
  explicit ClockOffset(size_t window = 16) : window_(window) {}

  // A heartbeat sent at `sent`, answered at `received` (both this host's clock), stamped
  // `coordinator_time` by the coordinator. Samples without a stamp (an older coordinator) or
  // with the clock stepping back are ignored.
  void AddSample(absl::Time sent, absl::Time coordinator_time, absl::Time received);

  bool known() const { return !samples_.empty(); }
  // Coordinator minus this host, in microseconds (0 when unknown).
  int64_t offset_us() const;
  // Half the best sample's round trip (-1 when unknown).
  int64_t error_us() const;

 private:
  struct Sample {
    int64_t offset_us;
    int64_t round_trip_us;
  };
  const Sample* Best() const;

  const size_t window_;
  std::deque<Sample> samples_;
};

}  // namespace ard::timeline
