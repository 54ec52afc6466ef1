// Job: a running job's tensors: SUBMIT through the readiness table to the negotiator, committed
// responses to the executor, joins, and GPU registration.
#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/jobs/job.h"
#include "daemon/local/rank_sessions.h"
#include "daemon/timeline/recorder.h"

namespace ard::jobs {

using dataplane::Executor;
using local::Session;
using negotiation::TensorRequest;

void Job::Submit(const std::shared_ptr<Session>& s, local::DecodedFrame frame) {
  const uint64_t id = frame.request_id;
  TensorRequest request;
  request.rank = s->rank;
  request.request_id = id;
  request.meta = frame.submit;
  request.splits = std::move(frame.splits);
  if (!s->BeginRequest(id, request.name())) {
    return s->Reject(
        id, absl::InvalidArgumentError(absl::StrCat("tensor ", request.name(), " (request ", id,
                                                    ") is already in flight from rank ", s->rank)));
  }
  auto reject = [&](const absl::Status& status) {
    local::SendComplete(*s, request, status, nullptr);
  };
  if (state() == JobState::kRunning && !departed_.ok()) Fail(departed_);
  if (state() != JobState::kRunning) return reject(context_->failure());
  if (table_->pending_tensors() >= env_.options.max_pending_tensors &&
      !table_->is_pending(request.name())) {
    const absl::Status full = absl::ResourceExhaustedError(
        absl::StrCat("job ", name_, " already has ", table_->pending_tensors(),
                     " tensors submitted by some ranks but not all (max_pending_tensors); tensor ",
                     request.name(), " from rank ", s->rank, " refused"));
    if (!pending_cap_logged_) {
      pending_cap_logged_ = true;
      Logger("local")->warn("{} (logged once per job)", full.message());
    }
    return reject(full);
  }
  if (frame.type == wire::MsgType::kGpuSubmit) {
    if (absl::Status st = Gpu().CheckSubmit(*s, frame); !st.ok()) return reject(st);
    request.gpu = frame.gpu_placement;
  } else {
    auto input = s->input.Resolve(frame.submit.segment, frame.submit.offset, frame.submit.bytes);
    if (!input.ok()) return reject(input.status());
    request.input = *std::move(input);
  }
  if (timeline_ != nullptr) timeline_->Record(timeline::Mark::kSubmit, s->rank, 0, request.name());
  std::vector<negotiation::Response> ready;
  const bool join = request.collective() == wire::Collective::kJoin;
  // The first of several local ranks to submit a tensor: the steady state may delay its vote
  // until the others did (one name lookup; nothing with one local rank).
  std::string partly;
  if (local_size_ > 1 && !join && !table_->is_pending(request.name())) partly = request.name();
  TensorRequest join_copy = join ? request : TensorRequest();
  if (auto st = table_->Submit(std::move(request), absl::Now(), &ready); !st.ok()) {
    return reject(st);
  }
  if (join) negotiator_->Join(join_copy);
  if (!partly.empty() && table_->is_pending(partly)) negotiator_->SubmittedPartly(partly);
  if (timeline_ != nullptr && timeline_->on()) {
    for (const auto& response : ready) {
      for (const auto& t : response.tensors) {
        timeline_->Record(timeline::Mark::kReady, -1, 0, t.name);
      }
    }
  }
  if (!ready.empty()) negotiator_->HostReady(std::move(ready));
}

void Job::OnCommitted(negotiation::Response response) {
  if (state() != JobState::kRunning) return;
  if (!executor_->TryRunInline(response)) executor_->Enqueue(std::move(response));
}

void Job::OnJoinDone(const absl::Status& status, int last_rank) {
  if (state() != JobState::kRunning) return;
  for (const TensorRequest& r : table_->ResetJoins()) {
    local::SendComplete(*members_[r.rank], r, status, nullptr, last_rank);
  }
}

void Job::GpuRegister(const std::shared_ptr<Session>& s, const local::DecodedFrame& frame) {
  const uint64_t id = frame.request_id;
  // A daemon without a GPU device refuses GPU frames before they reach a job (JobRegistry).
  if (state() != JobState::kRunning) {
    return s->Reject(id, absl::AbortedError(lifecycle_.failed() ? lifecycle_.failure()
                                                                : succession_.reform_reason()));
  }
  if (absl::Status st = Gpu().Register(*s, frame); !st.ok()) return s->Reject(id, st);
  if (gpu_->registered() < local_size_) return;
  negotiator_->PlanGpusAsync(
      gpu_->Host(local_order_),
      [this, alive = std::weak_ptr<bool>(alive_)](absl::StatusOr<gpu::CrossHostGpuPlan> plan) {
        if (!alive.expired()) StartGpu(std::move(plan));
      });
}

void Job::GpuUnregister(const std::shared_ptr<Session>& s, uint64_t request_id) {
  ReleaseGpu(s->rank);
  s->Send(local::EncodeEmpty(wire::MsgType::kGpuUnregistered, request_id));
}

void Job::ReleaseGpu(int rank) {
  if (gpu_ != nullptr) gpu_->Release(rank, context_ ? context_->failure() : absl::OkStatus());
}

JobGpu& Job::Gpu() {
  if (gpu_ == nullptr) gpu_ = std::make_unique<JobGpu>(env_.options, *env_.gpu, name_, size_);
  return *gpu_;
}

void Job::StartGpu(absl::StatusOr<gpu::CrossHostGpuPlan> plan) {
  if (state() != JobState::kRunning) return;
  if (!plan.ok()) return FailGpuForming(plan.status());
  gpu::CrossHostReduce cross_host;
  if (tcp_ != nullptr && tcp_->layout().cross_size > 1) cross_host = tcp_->HostAllreduce();
  auto collective = gpu_->Start(*plan, HereByRank(), std::move(cross_host), members_);
  if (!collective.ok()) return FailGpuForming(collective.status());
  // Prepared on the executor thread at this place in the committed order.
  executor_->AttachGpu(*std::move(collective));
}

std::vector<bool> Job::HereByRank() const {
  std::vector<bool> here(size_, false);
  for (int r : local_order_) {
    if (r >= 0 && r < size_) here[r] = true;
  }
  return here;
}

void Job::FailGpuForming(const absl::Status& status) {
  gpu_->FailRegistrations(status, members_);
  Fail(status);
}

}  // namespace ard::jobs
