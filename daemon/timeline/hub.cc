#include "daemon/timeline/hub.h"

#include "absl/strings/str_cat.h"

namespace ard::timeline {

std::shared_ptr<Recorder> Hub::ForJob(const std::string& job) {
  auto& r = recorders_[job];
  if (r == nullptr) r = std::make_shared<Recorder>(capacity_);
  return r;
}

absl::Duration Hub::Start(const std::string& job, absl::Duration duration, absl::Time now) {
  DropIdle();
  if (duration <= absl::ZeroDuration() || duration > max_duration_) duration = max_duration_;
  ForJob(job)->Start(now + duration);
  started_[job] = true;
  return duration;
}

absl::StatusOr<Recording> Hub::Stop(const std::string& job) {
  auto it = recorders_.find(job);
  if (it == recorders_.end() || !started_[job]) {
    return absl::NotFoundError(absl::StrCat("no timeline is being recorded for job ", job));
  }
  started_.erase(job);
  Recording r = it->second->Stop();
  DropIdle();
  return r;
}

void Hub::DropIdle() {
  for (auto it = recorders_.begin(); it != recorders_.end();) {
    if (it->second.use_count() == 1 && started_.count(it->first) == 0) {
      it = recorders_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace ard::timeline
