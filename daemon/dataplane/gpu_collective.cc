#include "daemon/dataplane/gpu_collective.h"

#include "absl/strings/str_cat.h"
#include "daemon/collectives/row_split.h"
#include "daemon/common/status_macros.h"

namespace ard::dataplane {

using negotiation::Response;

GpuCollective::GpuCollective(std::string job_name, std::vector<bool> local_ranks,
                             std::unique_ptr<gpu::GpuJob> job, gpu::UniqueId id)
    : job_name_(std::move(job_name)),
      local_ranks_(std::move(local_ranks)),
      size_(static_cast<int>(local_ranks_.size())),
      job_(std::move(job)),
      id_(id) {}

absl::Status GpuCollective::Prepare() {
  if (absl::Status st = job_->Init(id_); !st.ok()) {
    failed_ = absl::Status(
        st.code(),
        absl::StrCat("job ", job_name_, ": GPU communicator init failed: ", st.message()));
    job_->Abort(failed_);
  }
  return failed_;
}

void GpuCollective::Abort(const absl::Status& why) {
  // Cancelled is the job's normal end (Executor::Stop, Job::EndIfDetached): nothing to cut short;
  // Close finalizes the communicators. Any other status is a failure: the GPU work stops.
  if (why.ok() || absl::IsCancelled(why)) return;
  job_->Abort(why);
}

void GpuCollective::Close() { job_->Close(); }

absl::Status GpuCollective::Run(const Response& response, const SlotAllocator&,
                                std::vector<RankResults>* out, uint64_t* bytes_reduced) {
  if (!failed_.ok()) return failed_;
  if (absl::Status failure = job_->Failure(); !failure.ok()) {
    failed_ = failure;  // aborted from another thread between responses
    return failed_;
  }
  std::vector<gpu::GpuTensor> tensors;
  for (const auto& tensor : response.tensors) {
    const negotiation::TensorRequest& first = tensor.first();
    gpu::GpuTensor t;
    t.meta.dtype = static_cast<wire::DataType>(first.meta.dtype);
    t.meta.op = static_cast<wire::ReduceOp>(first.meta.reduce_op);
    const size_t elem = wire::DataTypeSize(first.meta.dtype);
    t.meta.count = elem == 0 ? 0 : first.meta.bytes / elem;
    t.prescale = first.meta.prescale;
    t.postscale = first.meta.postscale;
    for (int r = 0; r < size_; ++r) {
      if (!local_ranks_[r]) continue;  // its host feeds it to the communicator (or the mesh)
      const auto& req = tensor.ranks[r];
      if (!req || !req->gpu) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", tensor.name, ": rank ", r,
                         req ? " submitted it from host memory while others used GPU memory"
                             : " joined; join is not supported for GPU tensors"));
      }
      t.inputs.push_back(gpu::GpuTensorInput{r, req->gpu->offset, req->gpu->event});
    }
    *bytes_reduced += first.meta.bytes;
    tensors.push_back(std::move(t));
  }
  absl::Status st = RunCollective(response, tensors, out);
  // InvalidArgument is refused before any GPU work (GpuJob turns a communicator's refusal into
  // a job failure: other hosts may have accepted theirs), so the job goes on.
  if (absl::IsInvalidArgument(st) && job_->Failure().ok()) return st;
  if (!st.ok()) {
    failed_ = absl::Status(st.code(), absl::StrCat("job ", job_name_, ": GPU ",
                                                   negotiation::CollectiveName(response.collective),
                                                   " failed: ", st.message()));
    job_->Abort(failed_);
    return failed_;
  }
  return absl::OkStatus();
}

// Runs the response's collective and fills each rank's result shape. InvalidArgument for input
// only this tensor's ranks got wrong (the job goes on); another error is the GPU's (the job fails).
absl::Status GpuCollective::RunCollective(const Response& response,
                                          const std::vector<gpu::GpuTensor>& tensors,
                                          std::vector<RankResults>* out) {
  out->assign(response.tensors.size(), RankResults(size_));
  for (size_t i = 0; i < response.tensors.size(); ++i) {
    for (int r = 0; r < size_; ++r) {
      const auto& req = response.tensors[i].ranks[r];
      if (req) {
        (*out)[i][r] =
            RankResult{nullptr, {req->meta.shape, req->meta.shape + req->meta.ndims}, {}};
      }
    }
  }
  const wire::Collective collective =
      response.tensors.empty() ? response.collective : response.tensors[0].first().collective();
  if (collective == wire::Collective::kAllreduce) return job_->Allreduce(tensors);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const negotiation::ReadyTensor& tensor = response.tensors[i];
    const wire::Submit& m = tensor.first().meta;
    RankResults& results = (*out)[i];
    switch (collective) {
      case wire::Collective::kBroadcast:
        ARD_RETURN_IF_ERROR(job_->Broadcast(tensors[i], m.root_rank));
        for (auto& result : results) {
          if (result) result->shape.assign(m.shape, m.shape + m.ndims);
        }
        break;
      case wire::Collective::kAllgather:
        // Equal first dimensions: negotiation/validation.cc (scalars: the job's GPU submit check).
        ARD_RETURN_IF_ERROR(job_->Allgather(tensors[i]));
        for (auto& result : results) {
          if (result && !result->shape.empty()) result->shape[0] = m.shape[0] * size_;
        }
        break;
      case wire::Collective::kReducescatter: {
        if (m.ndims == 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "REDUCESCATTER of GPU tensor ", tensor.name, " needs at least one dimension"));
        }
        const int64_t d0 = m.shape[0];
        const size_t row = d0 == 0 ? 0 : tensors[i].meta.count / d0;
        std::vector<size_t> blocks;
        for (int r = 0; r < size_; ++r) {
          const int64_t rows = collectives::RowsOfRank(d0, size_, r);
          blocks.push_back(rows * row);
          if (results[r] && !results[r]->shape.empty()) results[r]->shape[0] = rows;
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

}  // namespace ard::dataplane
