#include "daemon/dataplane/executor.h"

#include <poll.h>

#include <atomic>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "catch2/catch.hpp"

namespace ard::dataplane {
namespace {

using negotiation::Response;

// A data plane that runs nothing and records whether it was prepared.
class RecordingCollective : public Collective {
 public:
  explicit RecordingCollective(std::atomic<bool>* prepared) : prepared_(prepared) {}
  absl::Status Prepare() override {
    prepared_->store(true);
    return absl::OkStatus();
  }
  absl::Status Run(const Response&, const SlotAllocator&, std::vector<RankResults>*,
                   uint64_t*) override {
    return absl::OkStatus();
  }
  absl::Status JobFailure(const absl::Status& error) const override { return error; }

 private:
  std::atomic<bool>* prepared_;
};

// Rounds that come only when the test releases one, each running `released`.
class ScriptedRounds : public IdleRounds {
 public:
  absl::StatusOr<bool> AwaitRound(int wakeup_fd, absl::Duration timeout) override {
    if (due_.HasBeenNotified()) return !ran_.exchange(true);
    pollfd p{wakeup_fd, POLLIN, 0};
    ::poll(&p, 1, 10);
    return false;
  }
  absl::StatusOr<std::vector<Response>> RunRound() override {
    std::vector<Response> out;
    Response start;
    start.attach_gpu = true;
    out.push_back(start);
    return out;
  }
  void Abort(const absl::Status&) override {}
  bool active() const override { return true; }
  void Release() { due_.Notify(); }

 private:
  absl::Notification due_;
  std::atomic<bool> ran_{false};
};

bool Eventually(const std::atomic<bool>& flag) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!flag.load() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
  return flag.load();
}

TEST_CASE("with rounds, the GPU data plane is prepared where a round releases its start") {
  auto job = std::make_shared<JobContext>();
  job->name = "j";
  job->size = 2;
  job->ranks.resize(2);
  std::atomic<bool> host_prepared{false};
  std::atomic<bool> gpu_prepared{false};
  ScriptedRounds rounds;
  Executor executor(job, std::make_unique<RecordingCollective>(&host_prepared), &rounds);
  REQUIRE(Eventually(host_prepared));
  executor.AttachGpu(std::make_unique<RecordingCollective>(&gpu_prepared));
  absl::SleepFor(absl::Milliseconds(200));  // idle executor, no round yet: NCCL init must wait
  CHECK_FALSE(gpu_prepared.load());
  rounds.Release();
  CHECK(Eventually(gpu_prepared));
  executor.Stop();
}

TEST_CASE("without rounds, the GPU data plane is prepared at its place in the queue") {
  auto job = std::make_shared<JobContext>();
  job->size = 1;
  job->ranks.resize(1);
  std::atomic<bool> host_prepared{false};
  std::atomic<bool> gpu_prepared{false};
  Executor executor(job, std::make_unique<RecordingCollective>(&host_prepared));
  executor.AttachGpu(std::make_unique<RecordingCollective>(&gpu_prepared));
  CHECK(Eventually(gpu_prepared));
  executor.Stop();
}

}  // namespace
}  // namespace ard::dataplane
