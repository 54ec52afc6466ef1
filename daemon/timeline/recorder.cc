#include "daemon/timeline/recorder.h"

#include <algorithm>

namespace ard::timeline {

void Recorder::Start(absl::Time until) {
  absl::MutexLock lock(&mu_);
  ring_.clear();
  ring_.reserve(std::min<size_t>(capacity_, 4096));
  next_ = 0;
  dropped_ = 0;
  until_ = until;
  on_.store(true, std::memory_order_relaxed);
}

Recording Recorder::Stop() {
  absl::MutexLock lock(&mu_);
  on_.store(false, std::memory_order_relaxed);
  Recording r;
  r.dropped = dropped_;
  r.events.reserve(ring_.size());
  // Oldest first: once full, the oldest mark sits at next_.
  for (size_t i = 0; i < ring_.size(); ++i) {
    r.events.push_back(std::move(ring_[(next_ + i) % ring_.size()]));
  }
  ring_.clear();
  next_ = 0;
  dropped_ = 0;
  return r;
}

void Recorder::RecordOn(Mark mark, int32_t rank, uint64_t group, std::string_view tensor,
                        absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (!on()) return;  // stopped meanwhile
  if (now > until_) {
    on_.store(false, std::memory_order_relaxed);  // kept until Stop() collects it
    return;
  }
  Event e{absl::ToUnixMicros(now), mark, rank, group, std::string(tensor)};
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(e));
    return;
  }
  if (capacity_ == 0) return;
  ring_[next_] = std::move(e);
  next_ = (next_ + 1) % capacity_;
  ++dropped_;
}

}  // namespace ard::timeline
