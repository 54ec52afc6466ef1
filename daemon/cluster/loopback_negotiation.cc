#include "daemon/cluster/loopback_negotiation.h"

#include "absl/synchronization/mutex.h"

namespace ard::cluster {
namespace {

// Delivers a job's events to the local JobRegistry; ends once (Finish or Cancel).
class LoopbackWatch : public JobEventSink, public JobWatch {
 public:
  LoopbackWatch(std::function<void(const JobEvent&)> on_event,
                std::function<void(absl::Status)> on_end)
      : on_event_(std::move(on_event)), on_end_(std::move(on_end)) {}

  void Send(const JobEvent& event) override {
    absl::MutexLock lock(&mu_);
    if (!ended_) on_event_(event);
  }
  void Finish(const absl::Status& status) override { End(status); }
  void Cancel() override { End(absl::CancelledError("watch cancelled")); }

 private:
  void End(const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    if (ended_) return;
    ended_ = true;
    on_end_(status);
  }

  absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(const JobEvent&)> on_event_;
  std::function<void(absl::Status)> on_end_;
};

}  // namespace

std::shared_ptr<JobWatch> LoopbackNegotiation::WatchJob(
    const WatchJobRequest& request, std::function<void(const JobEvent&)> on_event,
    std::function<void(absl::Status)> on_end) {
  auto watch = std::make_shared<LoopbackWatch>(std::move(on_event), std::move(on_end));
  if (absl::Status s = coordinator_.Watch(request, watch); !s.ok()) {
    watch->Finish(s);
  }
  return watch;
}

}  // namespace ard::cluster
