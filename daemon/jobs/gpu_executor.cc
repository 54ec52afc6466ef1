#include "daemon/jobs/gpu_executor.h"

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"
#include "daemon/common/status_macros.h"
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
    t.prescale = first.meta.prescale;
    t.postscale = first.meta.postscale;
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
  std::vector<std::vector<std::vector<int64_t>>> shapes;  // per tensor, per rank
  absl::Status st = Run(response, tensors, &shapes);
  if (absl::IsInvalidArgument(st) && job_->CheckHealth().ok()) {
    // This tensor's input, not the GPU (which would have aborted the job): the job goes on.
    return CompleteAll(response, st);
  }
  if (st.ok()) st = job_->CheckHealth();
  if (!st.ok()) {
    const absl::Status failure(
        st.code(),
        absl::StrCat("job ", context_->name, ": GPU ",
                     negotiation::CollectiveName(response.collective), " failed: ", st.message()));
    Fail(failure);
    return CompleteAll(response, failed_);
  }
  for (size_t i = 0; i < response.tensors.size(); ++i) {
    const auto& tensor = response.tensors[i];
    for (int r = 0; r < context_->size; ++r) {
      if (!tensor.ranks[r]) continue;
      const negotiation::TensorRequest& req = *tensor.ranks[r];
      dataplane::RankResult result;
      result.shape = shapes[i][r];
      if (context_->ranks[r] != nullptr) {
        dataplane::Executor::SendComplete(*context_->ranks[r], req, absl::OkStatus(), &result);
      }
    }
  }
  context_->collectives_completed.fetch_add(response.tensors.size(), std::memory_order_relaxed);
  context_->bytes_reduced.fetch_add(bytes, std::memory_order_relaxed);
}

// Runs the response's collective and fills each rank's result shape. InvalidArgument for input
// only this tensor's ranks got wrong (the job goes on); another error is the GPU's (the job fails).
absl::Status GpuExecutor::Run(const Response& response, const std::vector<gpu::GpuTensor>& tensors,
                              std::vector<std::vector<std::vector<int64_t>>>* shapes) {
  const int size = context_->size;
  for (const auto& tensor : response.tensors) {
    std::vector<std::vector<int64_t>> per_rank;
    for (int r = 0; r < size; ++r) {
      if (!tensor.ranks[r]) {  // another host's rank that joined: no COMPLETE from here
        per_rank.emplace_back();
        continue;
      }
      const wire::Submit& m = tensor.ranks[r]->meta;
      per_rank.emplace_back(m.shape, m.shape + m.ndims);
    }
    shapes->push_back(std::move(per_rank));
  }
  const wire::Collective collective =
      response.tensors.empty() ? response.collective : response.tensors[0].first().collective();
  if (collective == wire::Collective::kAllreduce) return job_->Allreduce(tensors);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const negotiation::ReadyTensor& tensor = response.tensors[i];
    const wire::Submit& m = tensor.first().meta;
    auto& out = (*shapes)[i];
    switch (collective) {
      case wire::Collective::kBroadcast:
        ARD_RETURN_IF_ERROR(job_->Broadcast(tensors[i], m.root_rank));
        for (auto& shape : out) shape.assign(m.shape, m.shape + m.ndims);  // equal on all
        break;
      case wire::Collective::kAllgather: {
        // Equal first dimensions: negotiation/validation.cc (scalars: CheckGpuSubmit).
        ARD_RETURN_IF_ERROR(job_->Allgather(tensors[i]));
        for (auto& shape : out) {
          if (!shape.empty()) shape[0] = m.shape[0] * size;
        }
        break;
      }
      case wire::Collective::kReducescatter: {
        if (m.ndims == 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "REDUCESCATTER of GPU tensor ", tensor.name, " needs at least one dimension"));
        }
        const int64_t d0 = m.shape[0];
        const size_t row = d0 == 0 ? 0 : tensors[i].meta.count / d0;
        std::vector<size_t> blocks;
        for (int r = 0; r < size; ++r) {
          // As for host tensors: the first d0 % size ranks get one row more.
          const int64_t rows = d0 / size + (r < d0 % size ? 1 : 0);
          blocks.push_back(rows * row);
          if (!out[r].empty()) out[r][0] = rows;
        }
        ARD_RETURN_IF_ERROR(job_->Reducescatter(tensors[i], blocks));
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat(negotiation::CollectiveName(collective),
                                                       " is not served for GPU tensors"));
    }
  }
  return absl::OkStatus();
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
