// GpuJob's waits, communicator calls and teardown (see gpu_job.h). Executor thread only, except
// the destructor's teardown (after the executor joined). Every wait polls: the host never blocks
// in CUDA or NCCL, so an Abort from another thread (a flag) and the deadline are always obeyed.
#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/duration_format.h"
#include "daemon/common/status_macros.h"
#include "daemon/gpu/gpu_job.h"

namespace ard::gpu {

absl::Status GpuJob::Await(const std::string& what, absl::Duration timeout,
                           const std::function<absl::StatusOr<bool>()>& done) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Microseconds(10);
  for (int polls = 0;; ++polls) {
    if (stop_.load()) return Failure();
    ARD_ASSIGN_OR_RETURN(bool finished, done());
    if (finished) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "GPU ", what, " on host ", options_.host_name, " not done within ",
          FormatDurationShort(timeout), " (a peer dead or slow, or a process's stream stuck)"));
    }
    if (polls < 64) {  // short collectives finish within a few yields
      std::this_thread::yield();
    } else {
      absl::SleepFor(pause);
      pause = std::min(pause * 2, absl::Milliseconds(1));
    }
  }
}

absl::Status GpuJob::AwaitComms(const std::string& what, absl::Duration timeout) {
  return Await(what, timeout, [&]() -> absl::StatusOr<bool> {
    for (LocalGpu& gpu : gpus_) {
      absl::StatusOr<CommState> state = gpu.comm->State();
      if (!state.ok()) {
        return absl::Status(state.status().code(),
                            absl::StrCat("GPU ", gpu.device, " communicator (", what,
                                         "): ", state.status().message()));
      }
      if (*state == CommState::kInProgress) return false;
    }
    return true;
  });
}

absl::Status GpuJob::AwaitStream(LocalGpu& gpu, const std::string& what) {
  return Await(what, options_.op_timeout, [&] { return device_.Query(*gpu.stream); });
}

absl::Status GpuJob::AwaitStreams(const std::string& what) {
  return Await(what, options_.op_timeout, [&]() -> absl::StatusOr<bool> {
    bool all = true;  // every stream asked: one GPU's error may be why another's work waits
    for (LocalGpu& gpu : gpus_) {
      ARD_ASSIGN_OR_RETURN(bool idle, device_.Query(*gpu.stream));
      all = all && idle;
    }
    return all;
  });
}

// One grouped call per local GPU, then a wait until each communicator has its work on its stream
// (nonblocking NCCL may answer ncclInProgress). A refusal here fails the job, whatever its code:
// the input was checked, and other hosts' calls may already be accepted (they would wait for
// this host forever).
absl::Status GpuJob::Grouped(const std::string& what,
                             const std::function<absl::Status(LocalGpu&)>& call) {
  ARD_RETURN_IF_ERROR(device_.GroupStart());
  absl::Status status;
  for (LocalGpu& gpu : gpus_) {
    if (!status.ok()) break;
    status = call(gpu);
  }
  absl::Status end = device_.GroupEnd();  // always close the group
  if (status.ok()) status = end;
  if (absl::IsInvalidArgument(status) || absl::IsUnimplemented(status)) {
    return absl::InternalError(
        absl::StrCat("GPU ", what, " refused by the communicator: ", status.message()));
  }
  ARD_RETURN_IF_ERROR(status);
  return AwaitComms(what, options_.op_timeout);
}

void GpuJob::AbortCommunicators() {
  for (LocalGpu& gpu : gpus_) {
    if (gpu.comm != nullptr) gpu.comm->Abort();
    gpu.comm.reset();
  }
}

// After an abort the streams' collectives fail at once; a stream waiting on a process's event
// that is never recorded does not. True when every stream drained within `timeout`.
bool GpuJob::DrainStreams(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (LocalGpu& gpu : gpus_) {
    if (gpu.stream == nullptr) continue;
    while (true) {
      absl::StatusOr<bool> idle = device_.Query(*gpu.stream);
      if (!idle.ok() || *idle) break;  // an error: nothing more runs on it
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Microseconds(200));
    }
  }
  return true;
}

void GpuJob::Close() {
  if (Failure().ok() && !gpus_.empty() && gpus_[0].comm != nullptr) {
    absl::Status status;
    for (LocalGpu& gpu : gpus_) {
      if (status.ok()) status = gpu.comm->Finalize();
    }
    if (status.ok()) status = AwaitComms("communicator finalize", options_.op_timeout);
    if (status.ok()) {
      for (LocalGpu& gpu : gpus_) gpu.comm.reset();  // ncclCommDestroy
    } else {
      Abort(status);
    }
  }
  Abort(absl::CancelledError("job ended"));  // later calls fail; a failure already set stays
  AbortCommunicators();
  if (DrainStreams(options_.op_timeout)) retained_.clear();
}

absl::Status GpuJob::Begin() {
  if (absl::Status failure = Failure(); !failure.ok()) {
    AbortCommunicators();  // aborted from another thread since the last call: end them here
    return failure;
  }
  if (gpus_.empty() || gpus_[0].comm == nullptr) {
    return absl::FailedPreconditionError("GPU communicator not initialized");
  }
  absl::MutexLock lock(&mu_);
  view_ = ranks_;
  for (LocalGpu& gpu : gpus_) {
    gpu.ranks.clear();
    for (const auto& [rank, r] : view_) {
      if (r.reg.device == gpu.device) gpu.ranks.push_back(rank);
    }
  }
  return absl::OkStatus();
}

// The end of every collective: OK only once its work is done on every local GPU (the completion
// rule). On failure the communicators are aborted here, on the thread that drives them. The
// snapshot's mappings are let go once nothing on the streams can touch them.
absl::Status GpuJob::Finish(const std::string& what, absl::Status status) {
  if (status.ok()) status = AwaitStreams(what);
  if (status.ok()) status = CheckHealth();
  if (!status.ok()) {
    Abort(status);
    AbortCommunicators();
    status = Failure();  // the first cause (an Abort from another thread names it)
    if (!DrainStreams(absl::Seconds(1))) {
      for (auto& [rank, r] : view_) retained_.emplace(rank, std::move(r));
    }
  }
  view_.clear();
  return status;
}

}  // namespace ard::gpu
