#include "daemon/jobs/gpu_executor.h"

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/dataplane/executor.h"

namespace ard::jobs {

using negotiation::Response;

GpuExecutor::GpuExecutor(std::shared_ptr<dataplane::JobContext> context,
                         std::unique_ptr<gpu::GpuJob> job, gpu::UniqueId id,
                         std::function<void(absl::Status)> on_failure)
    : context_(std::move(context)),
      job_(std::move(job)),
      id_(id),
      on_failure_(std::move(on_failure)),
      thread_([this] { Run(); }) {}

GpuExecutor::~GpuExecutor() { Stop(); }

void GpuExecutor::Enqueue(Response response) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(response));
}

void GpuExecutor::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  // Aborting the communicators makes a collective waiting for peers return at once.
  job_->Abort(context_->failure().ok() ? absl::CancelledError("job ended") : context_->failure());
  if (thread_.joinable()) thread_.join();
}

void GpuExecutor::Fail(const absl::Status& status) {
  job_->Abort(status);
  if (failed_.ok()) {
    failed_ = status;
    if (on_failure_) on_failure_(status);
  }
}

void GpuExecutor::ExecuteOnCaller(const Response& response) {
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&initialized_));
  }
  Execute(response);
}

void GpuExecutor::Run() {
  if (absl::Status st = job_->Init(id_); !st.ok()) {
    Fail(absl::Status(st.code(), absl::StrCat("job ", context_->name,
                                              ": GPU communicator init failed: ", st.message())));
  }
  {
    absl::MutexLock lock(&mu_);
    initialized_ = true;
  }
  while (true) {
    Response response;
    bool stopping;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](GpuExecutor* e)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(e->mu_) { return e->stopping_ || !e->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stopping with nothing left
      response = std::move(queue_.front());
      queue_.pop_front();
      stopping = stopping_;
    }
    if (stopping) {
      CompleteAll(response, context_->failure().ok() ? absl::UnavailableError("job ended")
                                                     : context_->failure());
      continue;
    }
    Execute(response);
  }
}

void GpuExecutor::Execute(const Response& response) {
  if (!response.error.ok()) return CompleteAll(response, response.error);
  if (absl::Status failure = context_->failure(); !failure.ok()) {
    return CompleteAll(response, failure);
  }
  if (!failed_.ok()) return CompleteAll(response, failed_);
  std::vector<gpu::GpuTensor> tensors;
  uint64_t bytes = 0;
  for (const auto& tensor : response.tensors) {
    const negotiation::TensorRequest& first = tensor.first();
    gpu::GpuTensor t;
    t.meta.dtype = static_cast<wire::DataType>(first.meta.dtype);
    t.meta.op = static_cast<wire::ReduceOp>(first.meta.reduce_op);
    const size_t elem = wire::DataTypeSize(first.meta.dtype);
    t.meta.count = elem == 0 ? 0 : first.meta.bytes / elem;
    for (int r = 0; r < context_->size; ++r) {
      // Another host's rank: its host feeds it to the communicator (or the TCP mesh).
      if (context_->cross_size > 1 && context_->host_of_rank[r] != context_->cross_rank) continue;
      const auto& req = tensor.ranks[r];
      if (!req || !req->gpu) {
        return CompleteAll(response, absl::InvalidArgumentError(absl::StrCat(
                                         "tensor ", tensor.name, ": rank ", r,
                                         req ? " submitted it from host memory while others used "
                                               "GPU memory"
                                             : " joined; join is not supported for GPU tensors")));
      }
      t.inputs.push_back(gpu::GpuTensorInput{r, req->gpu->offset, req->gpu->event});
    }
    bytes += first.meta.bytes;
    tensors.push_back(std::move(t));
  }
  absl::Status st = job_->Allreduce(tensors);
  if (st.ok()) st = job_->CheckHealth();
  if (!st.ok()) {
    const absl::Status failure(
        st.code(), absl::StrCat("job ", context_->name, ": GPU allreduce failed: ", st.message()));
    Fail(failure);
    return CompleteAll(response, failed_);
  }
  for (const auto& tensor : response.tensors) {
    for (int r = 0; r < context_->size; ++r) {
      if (!tensor.ranks[r]) continue;
      const negotiation::TensorRequest& req = *tensor.ranks[r];
      dataplane::RankResult result;
      result.shape.assign(req.meta.shape, req.meta.shape + req.meta.ndims);
      if (context_->ranks[r] != nullptr) {
        dataplane::Executor::SendComplete(*context_->ranks[r], req, absl::OkStatus(), &result);
      }
    }
  }
  context_->collectives_completed.fetch_add(response.tensors.size(), std::memory_order_relaxed);
  context_->bytes_reduced.fetch_add(bytes, std::memory_order_relaxed);
}

void GpuExecutor::CompleteAll(const Response& response, const absl::Status& status) {
  for (const auto& tensor : response.tensors) {
    for (int r = 0; r < context_->size; ++r) {
      if (tensor.ranks[r] && context_->ranks[r] != nullptr) {
        dataplane::Executor::SendComplete(*context_->ranks[r], *tensor.ranks[r], status, nullptr);
      }
    }
  }
}

}  // namespace ard::jobs
