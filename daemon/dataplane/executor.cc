#include "daemon/dataplane/executor.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/logging.h"
#include "daemon/metrics/daemon_metrics.h"
#include "daemon/timeline/recorder.h"

namespace ard::dataplane {

using negotiation::Response;

namespace {

bool HasGpuTensors(const Response& response) {
  for (const auto& t : response.tensors) {
    for (const auto& r : t.ranks) {
      if (r && r->gpu) return true;
    }
  }
  return false;
}

}  // namespace

Executor::Executor(std::shared_ptr<JobContext> job, std::unique_ptr<Collective> host,
                   IdleRounds* rounds)
    : job_(std::move(job)), host_(std::move(host)), rounds_(rounds) {
  if (rounds_ != nullptr) wakeup_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::thread([this] { Run(); });
}

Executor::~Executor() {
  Stop();
  if (wakeup_fd_ >= 0) ::close(wakeup_fd_);
}

void Executor::Wake() {
  if (wakeup_fd_ < 0) return;
  const uint64_t one = 1;
  (void)!::write(wakeup_fd_, &one, sizeof(one));
}

uint64_t Executor::Committed(const Response& response) {
  const uint64_t group = groups_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (job_->timeline != nullptr && job_->timeline->on()) {
    const absl::Time now = absl::Now();
    for (const auto& t : response.tensors) {
      job_->timeline->RecordAt(timeline::Mark::kCommit, -1, group, t.name, now);
    }
  }
  return group;
}

void Executor::Enqueue(Response response) {
  const uint64_t group = Committed(response);
  {
    absl::MutexLock lock(&mu_);
    queue_.push_back(Item{std::move(response), nullptr, group});
  }
  Wake();
}

void Executor::AttachGpu(std::unique_ptr<Collective> gpu) {
  {
    absl::MutexLock lock(&mu_);
    if (rounds_ != nullptr) {
      held_gpu_ = std::move(gpu);  // a response with attach_gpu places it
      return;
    }
    queue_.push_back(Item{Response(), std::move(gpu)});
  }
  Wake();
}

bool Executor::TryRunInline(Response& response) {
  uint64_t bytes = 0;
  for (const auto& t : response.tensors) bytes += t.first().meta.bytes;
  if (!host_->RunsInline(bytes) || HasGpuTensors(response) || response.attach_gpu) return false;
  {
    absl::MutexLock lock(&mu_);
    if (busy_ || stopping_ || !queue_.empty()) return false;
    busy_ = true;  // the executor thread cannot start anything meanwhile: the queue is empty and
                   // only this (the loop) thread enqueues
  }
  const uint64_t group = Committed(response);
  Item item{std::move(response), nullptr, group};
  Dispatch(item, /*stopping=*/false);
  absl::MutexLock lock(&mu_);
  busy_ = false;
  return true;
}

void Executor::Abort(const absl::Status& why) {
  Collective* gpu;
  {
    absl::MutexLock lock(&mu_);
    gpu = gpu_.get();  // destroyed only with the executor
  }
  host_->Abort(why);
  if (gpu != nullptr) gpu->Abort(why);
  if (rounds_ != nullptr) rounds_->Abort(why);
}

void Executor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  const absl::Status failure = job_->failure();
  Abort(failure.ok() ? absl::CancelledError("job ended") : failure);
  Wake();
  if (thread_.joinable()) thread_.join();
}

void Executor::Run() {
  pthread_setname_np(pthread_self(), absl::StrCat("ard-exec-", job_->id).substr(0, 15).c_str());
  if (absl::Status st = host_->Prepare(); !st.ok() && job_->report_failure) {
    job_->report_failure(st);
  }
  bool rounds = rounds_ != nullptr;
  for (;;) {
    Item item;
    bool stopping;
    if (rounds) {
      bool idle;
      {
        absl::MutexLock lock(&mu_);
        idle = queue_.empty() && !stopping_;
      }
      if (idle) {
        rounds = IdleRound();
        continue;
      }
    }
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Executor* e)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) { return e->stopping_ || !e->queue_.empty(); },
          this));
      if (queue_.empty()) break;  // stopping and drained
      item = std::move(queue_.front());
      queue_.pop_front();
      stopping = stopping_;
      busy_ = true;
    }
    Dispatch(item, stopping);
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
  // What only this thread may release (a GPU communicator is ended by the thread that drives it).
  Collective* gpu;
  {
    absl::MutexLock lock(&mu_);
    gpu = gpu_.get();
  }
  host_->Close();
  if (gpu != nullptr) gpu->Close();
}

bool Executor::IdleRound() {
  absl::StatusOr<bool> due = rounds_->AwaitRound(wakeup_fd_, absl::Seconds(1));
  uint64_t drained;
  while (::read(wakeup_fd_, &drained, sizeof(drained)) > 0) {
  }
  absl::StatusOr<std::vector<Response>> released = std::vector<Response>();
  if (due.ok() && *due) released = rounds_->RunRound();
  const absl::Status status = due.ok() ? released.status() : due.status();
  if (!status.ok()) {  // the mesh is unusable: the job fails (unless it already did or ended)
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      stopping = stopping_;
    }
    if (!stopping && job_->failure().ok()) {
      Logger("dataplane")
          ->warn("readiness round failed job={} error=\"{}\"", job_->name, status.message());
      const absl::Status cause = job_->AwaitFailure(host_->cause_grace());
      if (cause.ok() && job_->report_failure) job_->report_failure(host_->JobFailure(status));
    }
    return false;
  }
  for (Response& response : *released) {
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      busy_ = true;
      stopping = stopping_;
    }
    const uint64_t group = Committed(response);  // released by the round: committed now
    Item item{std::move(response), nullptr, group};
    Dispatch(item, stopping);
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
  return rounds_->active();
}

void Executor::Dispatch(Item& item, bool stopping) {
  if (item.response.attach_gpu) {
    absl::MutexLock lock(&mu_);
    item.attach_gpu = std::move(held_gpu_);
    if (item.attach_gpu == nullptr) return;  // the GPU data plane failed to form: the job failed
  }
  if (item.attach_gpu != nullptr) {
    Collective* gpu = item.attach_gpu.get();
    {
      absl::MutexLock lock(&mu_);
      gpu_ = std::move(item.attach_gpu);
    }
    if (!job_->failure().ok() || stopping) return;  // never used: responses fail first
    if (absl::Status st = gpu->Prepare(); !st.ok() && job_->report_failure) {
      job_->report_failure(st);
    }
    return;
  }
  const Response& response = item.response;
  absl::Status failure = job_->failure();
  if (!failure.ok()) {
    CompleteAll(response, failure);
  } else if (stopping) {
    CompleteAll(response, absl::UnavailableError("allreduced is shutting down"));
  } else if (!response.error.ok()) {
    CompleteAll(response, response.error);
  } else {
    Execute(response, item.group);
  }
}

absl::StatusOr<std::shared_ptr<shm::ResultSlot>> Executor::AllocateSlot(uint64_t bytes) {
  int new_segment = -1;
  auto slot = job_->results->Allocate(bytes, &new_segment);
  if (slot.ok() && new_segment >= 0) {
    // Every rank maps the new segment before any COMPLETE that names it (same socket, in order).
    job_->sink->AnnounceSegment(static_cast<uint32_t>(new_segment),
                                *job_->results->segment(new_segment));
  }
  return slot;
}

void Executor::Execute(const Response& response, uint64_t group) {
  Collective* collective = host_.get();
  if (HasGpuTensors(response)) {
    absl::MutexLock lock(&mu_);
    collective = gpu_.get();
  }
  if (collective == nullptr) {  // the job's GPU submit check makes this impossible
    return CompleteAll(response, absl::InternalError("GPU tensor without a GPU data plane"));
  }
  const SlotAllocator allocate = [this](uint64_t bytes) { return AllocateSlot(bytes); };
  // Compute every tensor first (a group is atomic: one failure fails the group), then complete.
  std::vector<RankResults> results;
  uint64_t bytes = 0;
  const absl::Time start = absl::Now();
  timeline::Recorder* timeline = job_->timeline.get();
  if (timeline != nullptr) timeline->RecordAt(timeline::Mark::kExecStart, -1, group, "", start);
  if (absl::Status s = collective->Run(response, allocate, &results, &bytes); !s.ok()) {
    const absl::Status fatal = collective->JobFailure(s);
    if (job_->metrics != nullptr) job_->metrics->OnError(fatal.ok() ? "collective" : "data_plane");
    if (fatal.ok()) {  // only these tensors: the job goes on
      Logger("dataplane")
          ->warn("collective failed job={} tensor={} error=\"{}\"", job_->name,
                 response.tensors.empty() ? "-" : response.tensors[0].name, s.message());
      return CompleteAll(response, s);
    }
    Logger("dataplane")->warn("data plane failed job={} error=\"{}\"", job_->name, fatal.message());
    // Ranks get the job's real cause rather than this symptom when it arrives in time.
    const absl::Status cause = job_->AwaitFailure(collective->cause_grace());
    if (cause.ok() && job_->report_failure) job_->report_failure(fatal);
    return CompleteAll(response, cause.ok() ? fatal : cause);
  }
  if (timeline != nullptr && timeline->on()) {
    if (!response.reduced.empty()) timeline->Record(timeline::Mark::kCarried, -1, group, "");
    const TransferSpan transfer = collective->last_transfer();
    if (transfer.start != absl::InfinitePast()) {
      timeline->RecordAt(timeline::Mark::kTransferStart, -1, group, "", transfer.start);
      timeline->RecordAt(timeline::Mark::kTransferEnd, -1, group, "", transfer.end);
    }
  }
  for (size_t i = 0; i < response.tensors.size(); ++i) {
    const auto& tensor = response.tensors[i];
    for (int r = 0; r < job_->size; ++r) {
      if (!tensor.ranks[r]) continue;
      const auto& result = results[i][r];  // absent: as an empty result
      job_->sink->Complete(r, *tensor.ranks[r], absl::OkStatus(), result ? &*result : nullptr,
                           response.join_last_rank);
    }
  }
  if (timeline != nullptr) timeline->Record(timeline::Mark::kComplete, -1, group, "");
  job_->collectives_completed.fetch_add(response.tensors.size(), std::memory_order_relaxed);
  job_->bytes_reduced.fetch_add(bytes, std::memory_order_relaxed);
  if (job_->metrics != nullptr) {
    job_->metrics->OnCollective(job_->name, negotiation::CollectiveName(response.collective),
                                response.tensors.size(), bytes, absl::Now() - start,
                                job_->results->used_bytes());
    if (!response.reduced.empty()) {
      job_->metrics->OnRoundCarried(job_->name, response.tensors.size());
    }
  }
  SPDLOG_LOGGER_TRACE(Logger("dataplane"), "executed job={} tensors={} bytes={}", job_->name,
                      response.tensors.size(), bytes);
}

void Executor::CompleteAll(const Response& response, const absl::Status& status) {
  for (const auto& tensor : response.tensors) {
    for (int r = 0; r < job_->size; ++r) {
      if (tensor.ranks[r]) job_->sink->Complete(r, *tensor.ranks[r], status, nullptr, -1);
    }
  }
}

}  // namespace ard::dataplane
