#include "daemon/dataplane/executor.h"

#include <poll.h>

#include <atomic>
#include <vector>

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

// A data plane that gives every present rank of every tensor a result of shape {rank + 1}.
class ShapingCollective : public Collective {
 public:
  absl::Status Run(const Response& response, const SlotAllocator&, std::vector<RankResults>* out,
                   uint64_t*) override {
    for (const auto& t : response.tensors) {
      RankResults results(t.ranks.size());
      for (size_t r = 0; r < t.ranks.size(); ++r) {
        if (t.ranks[r]) results[r] = RankResult{nullptr, {static_cast<int64_t>(r) + 1}, {}};
      }
      out->push_back(std::move(results));
    }
    return absl::OkStatus();
  }
  absl::Status JobFailure(const absl::Status& error) const override { return error; }
};

// The ranks' side of the seam: records every COMPLETE the executor sends.
class RecordingSink : public CompletionSink {
 public:
  struct Completed {
    int rank;
    uint64_t request_id;
    absl::StatusCode code;
    std::vector<int64_t> shape;  // empty without a result
    int join_last_rank;
  };

  void AnnounceSegment(uint32_t, const shm::MappedSegment&) override {}
  void Complete(int rank, const negotiation::TensorRequest& request, const absl::Status& status,
                const RankResult* result, int join_last_rank) override {
    absl::MutexLock lock(&mu_);
    completed_.push_back(Completed{rank, request.request_id, status.code(),
                                   result != nullptr ? result->shape : std::vector<int64_t>(),
                                   join_last_rank});
  }
  std::vector<Completed> AwaitCompleted(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return completed_.size() >= n; };
    mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
    return completed_;
  }

 private:
  absl::Mutex mu_;
  std::vector<Completed> completed_ ABSL_GUARDED_BY(mu_);
};

// One tensor of a 3-rank job in which ranks 0 and 2 take part (request ids 10 and 12).
Response TwoOfThreeRanks(int join_last_rank) {
  Response response;
  response.join_last_rank = join_last_rank;
  negotiation::ReadyTensor tensor;
  tensor.name = "t";
  tensor.ranks.resize(3);
  for (int r : {0, 2}) {
    negotiation::TensorRequest request;
    request.rank = r;
    request.request_id = 10 + r;
    tensor.ranks[r] = request;
  }
  response.tensors.push_back(std::move(tensor));
  return response;
}

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

// The job's side of the commit road: admits what `open` allows and records each admission.
class RecordingGate : public CommitGate {
 public:
  uint64_t Admit(const Response& response, CommitOrigin origin) override {
    absl::MutexLock lock(&mu_);
    origins_.push_back(origin);
    return open_ ? ++groups_ : 0;
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    open_ = false;
  }
  std::vector<CommitOrigin> origins() const {
    absl::MutexLock lock(&mu_);
    return origins_;
  }

 private:
  mutable absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t groups_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<CommitOrigin> origins_ ABSL_GUARDED_BY(mu_);
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
  std::atomic<bool> host_prepared{false};
  std::atomic<bool> gpu_prepared{false};
  ScriptedRounds rounds;
  RecordingGate gate;
  Executor executor(job, std::make_unique<RecordingCollective>(&host_prepared), gate, &rounds);
  REQUIRE(Eventually(host_prepared));
  executor.AttachGpu(std::make_unique<RecordingCollective>(&gpu_prepared));
  absl::SleepFor(absl::Milliseconds(200));  // idle executor, no round yet: NCCL init must wait
  CHECK_FALSE(gpu_prepared.load());
  rounds.Release();
  CHECK(Eventually(gpu_prepared));
  executor.Stop();
  // The round's release passed the job's gate like any committed response.
  CHECK(gate.origins() == std::vector<CommitOrigin>{CommitOrigin::kReleased});
}

TEST_CASE("without rounds, the GPU data plane is prepared at its place in the queue") {
  auto job = std::make_shared<JobContext>();
  job->size = 1;
  std::atomic<bool> host_prepared{false};
  std::atomic<bool> gpu_prepared{false};
  RecordingGate gate;
  Executor executor(job, std::make_unique<RecordingCollective>(&host_prepared), gate);
  executor.AttachGpu(std::make_unique<RecordingCollective>(&gpu_prepared));
  CHECK(Eventually(gpu_prepared));
  executor.Stop();
}

TEST_CASE("an executed response completes each taking-part rank through the job's sink") {
  auto job = std::make_shared<JobContext>();
  job->size = 3;
  auto sink = std::make_shared<RecordingSink>();
  job->sink = sink;
  RecordingGate gate;
  Executor executor(job, std::make_unique<ShapingCollective>(), gate);
  executor.Commit(TwoOfThreeRanks(/*join_last_rank=*/2));
  const auto completed = sink->AwaitCompleted(2);
  executor.Stop();
  REQUIRE(completed.size() == 2);
  CHECK(completed[0].rank == 0);
  CHECK(completed[0].request_id == 10);
  CHECK(completed[0].code == absl::StatusCode::kOk);
  CHECK(completed[0].shape == std::vector<int64_t>{1});
  CHECK(completed[1].rank == 2);
  CHECK(completed[1].request_id == 12);
  CHECK(completed[1].shape == std::vector<int64_t>{3});
  CHECK(completed[1].join_last_rank == 2);
}

TEST_CASE("a response the job's gate refuses never runs") {
  auto job = std::make_shared<JobContext>();
  job->size = 3;
  auto sink = std::make_shared<RecordingSink>();
  job->sink = sink;
  RecordingGate gate;
  Executor executor(job, std::make_unique<ShapingCollective>(), gate);
  gate.Close();
  executor.Commit(TwoOfThreeRanks(/*join_last_rank=*/-1));
  executor.Stop();
  CHECK(sink->AwaitCompleted(0).empty());
  CHECK(gate.origins() == std::vector<CommitOrigin>{CommitOrigin::kCentral});
}

TEST_CASE("a failed job's responses complete through the sink with the job's failure") {
  auto job = std::make_shared<JobContext>();
  job->size = 3;
  auto sink = std::make_shared<RecordingSink>();
  job->sink = sink;
  REQUIRE(job->Fail(absl::AbortedError("host b left")));
  RecordingGate gate;
  Executor executor(job, std::make_unique<ShapingCollective>(), gate);
  executor.Commit(TwoOfThreeRanks(/*join_last_rank=*/-1));
  const auto completed = sink->AwaitCompleted(2);
  executor.Stop();
  REQUIRE(completed.size() == 2);
  for (const auto& c : completed) {
    CHECK(c.code == absl::StatusCode::kAborted);
    CHECK(c.shape.empty());
  }
}

}  // namespace
}  // namespace ard::dataplane
