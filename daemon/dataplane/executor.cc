#include "daemon/dataplane/executor.h"

#include <pthread.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/common/logging.h"
#include "daemon/dataplane/cross_host_collectives.h"
#include "daemon/local/frame_codec.h"

namespace ard::dataplane {

using negotiation::Response;
using negotiation::TensorRequest;

namespace {
// How long a host whose data plane broke waits for the job's real failure (reported by the host
// where it happened, through the coordinator: about one round trip) before reporting its own.
constexpr absl::Duration kCauseGrace = absl::Milliseconds(500);
}  // namespace

Executor::Executor(std::shared_ptr<JobContext> job) : job_(std::move(job)) {
  thread_ = std::thread([this] { Run(); });
}

Executor::~Executor() { Stop(); }

void Executor::Enqueue(Response response) { Enqueue(std::move(response), Runner()); }

void Executor::Enqueue(Response response, Runner run) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(Item{std::move(response), std::move(run)});
}

bool Executor::TryRunInline(Response& response) {
  constexpr uint64_t kInlineBytes = 64 << 10;
  uint64_t bytes = 0;
  for (const auto& t : response.tensors) bytes += t.first().meta.bytes;
  if (bytes > kInlineBytes || job_->cross_size > 1) return false;
  {
    absl::MutexLock lock(&mu_);
    if (busy_ || stopping_ || !queue_.empty()) return false;
    busy_ = true;  // the executor thread cannot start anything meanwhile: the queue is empty and
                   // only this (the loop) thread enqueues
  }
  Dispatch(response, Runner(), /*stopping=*/false);
  absl::MutexLock lock(&mu_);
  busy_ = false;
  return true;
}

void Executor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Executor::Run() {
  pthread_setname_np(pthread_self(), absl::StrCat("ard-exec-", job_->id).substr(0, 15).c_str());
  if (job_->connect_mesh) {
    auto mesh = job_->connect_mesh();
    if (mesh.ok()) {
      job_->SetMesh(*std::move(mesh));
      Logger("dataplane")->info("data plane connected job={} hosts={} cross_rank={}", job_->name,
                                job_->cross_size, job_->cross_rank);
    } else if (job_->report_failure) {
      job_->report_failure(absl::UnavailableError(
          absl::StrCat("data plane of job ", job_->name, ": ", mesh.status().message())));
    }
  }
  for (;;) {
    Item item;
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Executor* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) {
            return e->stopping_ || !e->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping and drained
      item = std::move(queue_.front());
      queue_.pop_front();
      stopping = stopping_;
      busy_ = true;
    }
    Dispatch(item.response, item.run, stopping);
    absl::MutexLock lock(&mu_);
    busy_ = false;
  }
}

void Executor::Dispatch(const Response& response, const Runner& run, bool stopping) {
  absl::Status failure = job_->failure();
  if (!failure.ok()) {
    CompleteAll(response, failure);
  } else if (stopping) {
    CompleteAll(response, absl::UnavailableError("allreduced is shutting down"));
  } else if (!response.error.ok()) {
    CompleteAll(response, response.error);
  } else if (run) {
    run(response);
  } else {
    Execute(response);
  }
}

absl::StatusOr<std::shared_ptr<shm::ResultSlot>> Executor::AllocateSlot(uint64_t bytes) {
  int new_segment = -1;
  auto slot = job_->results->Allocate(bytes, &new_segment);
  if (slot.ok() && new_segment >= 0) {
    // Every rank maps the new segment before any COMPLETE that names it (same socket, in order).
    auto segment = job_->results->segment(new_segment);
    const std::string frame = local::EncodeSegment(
        wire::MsgType::kResultSegment,
        wire::Segment{static_cast<uint32_t>(new_segment), 0, segment->size()});
    for (const auto& session : job_->ranks) {
      if (session != nullptr) session->Send(frame, segment->readonly_fd());
    }
  }
  return slot;
}

void Executor::Execute(const Response& response) {
  const SlotAllocator allocate = [this](uint64_t bytes) { return AllocateSlot(bytes); };
  // Compute every tensor first (a group is atomic: one failure fails the group), then complete.
  std::vector<std::vector<RankResult>> results(response.tensors.size());
  uint64_t bytes = 0;
  if (job_->cross_size > 1) {
    absl::Status s = RunCrossHostCollective(response, *job_, allocate, &results, &bytes);
    if (!s.ok()) {
      // A data-plane error leaves the mesh unusable: the whole job fails, on every host.
      Logger("dataplane")->warn("cross-host collective failed job={} error=\"{}\"", job_->name,
                                s.message());
      std::vector<std::string> hosts;
      for (size_t h = 0; h < job_->host_names.size(); ++h) {
        hosts.push_back(absl::StrCat(h, "=", job_->host_names[h]));
      }
      const absl::Status failure = absl::UnavailableError(
          absl::StrCat("data plane of job ", job_->name, " failed: ", s.message(), " (hosts ",
                       absl::StrJoin(hosts, ", "), ")"));
      // A peer's connection usually breaks because that host failed the job for a reason of its
      // own (one of its ranks died), which the coordinator is about to tell every host: wait a
      // moment for it, so ranks get the cause rather than this symptom.
      absl::Status cause = job_->AwaitFailure(kCauseGrace);
      if (cause.ok() && job_->report_failure) job_->report_failure(failure);
      CompleteAll(response, cause.ok() ? failure : cause);
      return;
    }
  }
  for (size_t i = 0; i < response.tensors.size() && job_->cross_size == 1; ++i) {
    absl::Status s =
        RunLocalCollective(response.tensors[i], job_->size, allocate, &results[i], &bytes);
    if (!s.ok()) {
      Logger("dataplane")->warn("collective failed job={} tensor={} error=\"{}\"", job_->name,
                                response.tensors[i].name, s.message());
      CompleteAll(response, s);
      return;
    }
  }
  for (size_t i = 0; i < response.tensors.size(); ++i) {
    const auto& tensor = response.tensors[i];
    for (int r = 0; r < job_->size; ++r) {
      if (!tensor.ranks[r] || job_->ranks[r] == nullptr) continue;
      SendComplete(*job_->ranks[r], *tensor.ranks[r], absl::OkStatus(), &results[i][r],
                   response.join_last_rank);
    }
  }
  job_->collectives_completed.fetch_add(response.tensors.size(), std::memory_order_relaxed);
  job_->bytes_reduced.fetch_add(bytes, std::memory_order_relaxed);
  SPDLOG_LOGGER_TRACE(Logger("dataplane"), "executed job={} tensors={} bytes={}", job_->name,
                      response.tensors.size(), bytes);
}

void Executor::CompleteAll(const Response& response, const absl::Status& status) {
  for (const auto& tensor : response.tensors) {
    for (int r = 0; r < job_->size; ++r) {
      if (tensor.ranks[r] && job_->ranks[r] != nullptr) {
        SendComplete(*job_->ranks[r], *tensor.ranks[r], status, nullptr);
      }
    }
  }
}

void Executor::SendComplete(local::Session& session, const TensorRequest& request,
                            const absl::Status& status, const RankResult* result,
                            int join_last_rank) {
  wire::Complete c{};
  c.code = static_cast<int32_t>(status.code());
  c.join_last_rank = join_last_rank;
  std::vector<int64_t> splits;
  std::shared_ptr<shm::ResultSlot> slot;
  if (status.ok() && result != nullptr) {
    slot = result->slot;
    if (slot) {
      c.segment = slot->segment;
      c.offset = slot->offset;
      c.bytes = slot->bytes;
    }
    c.ndims = static_cast<uint32_t>(result->shape.size());
    for (size_t d = 0; d < result->shape.size() && d < wire::kMaxDims; ++d) {
      c.shape[d] = result->shape[d];
    }
    splits = result->splits;
  }
  // The name is free and the slot held before the client can see the COMPLETE.
  session.EndRequest(request.request_id, slot);
  session.Send(local::EncodeComplete(request.request_id, c, splits,
                                     status.ok() ? "" : std::string(status.message())));
}

}  // namespace ard::dataplane
