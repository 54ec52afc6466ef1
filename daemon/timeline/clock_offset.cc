#include "daemon/timeline/clock_offset.h"

namespace ard::timeline {

void ClockOffset::AddSample(absl::Time sent, absl::Time coordinator_time, absl::Time received) {
  if (coordinator_time == absl::UnixEpoch() || received < sent) return;
  const int64_t sent_us = absl::ToUnixMicros(sent);
  const int64_t received_us = absl::ToUnixMicros(received);
  const int64_t midpoint_us = sent_us + (received_us - sent_us) / 2;
  samples_.push_back({absl::ToUnixMicros(coordinator_time) - midpoint_us, received_us - sent_us});
  while (samples_.size() > window_) samples_.pop_front();
}

const ClockOffset::Sample* ClockOffset::Best() const {
  const Sample* best = nullptr;
  for (const Sample& s : samples_) {
    if (best == nullptr || s.round_trip_us < best->round_trip_us) best = &s;
  }
  return best;
}

int64_t ClockOffset::offset_us() const {
  const Sample* best = Best();
  return best == nullptr ? 0 : best->offset_us;
}

int64_t ClockOffset::error_us() const {
  const Sample* best = Best();
  return best == nullptr ? -1 : best->round_trip_us / 2;
}

}  // namespace ard::timeline
