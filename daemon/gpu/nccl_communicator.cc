// NCCL communicators of the real gpu::Device (ARD_WITH_CUDA builds only): their grouped,
// nonblocking init with a deadline, NCCL groups, the wait for accepted work to be enqueued, async
// errors and abort. The collective calls themselves are in nccl_collectives.cc.
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/common/duration_format.h"
#include "daemon/common/status_macros.h"
#include "daemon/gpu/cuda_device_internal.h"

namespace ard::gpu::internal {
namespace {

// The communicators used inside this thread's current ncclGroupStart/End: GroupEnd waits for
// their work to be enqueued when it answers ncclInProgress.
thread_local std::vector<NcclCommunicator*> t_group_comms;
thread_local int t_group_depth = 0;

}  // namespace

absl::Status NcclError(ncclResult_t res, const char* call, ncclComm_t comm) {
  const char* last = comm != nullptr ? ncclGetLastError(comm) : "";
  auto message = absl::StrCat(call, ": ", ncclGetErrorString(res), last && *last ? " (" : "",
                              last ? last : "", last && *last ? ")" : "");
  switch (res) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(message);
    case ncclRemoteError:
    case ncclSystemError:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status NcclCommunicator::WaitEnqueued() {
  while (true) {
    if (aborted_) return absl::AbortedError("communicator aborted");
    ncclResult_t state = ncclSuccess;
    ncclResult_t res = ncclCommGetAsyncError(comm_, &state);
    if (res != ncclSuccess) return NcclError(res, "ncclCommGetAsyncError", comm_);
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclError(state, "communicator", comm_);
    std::this_thread::yield();
  }
}

absl::Status NcclCommunicator::AsyncError() {
  if (aborted_) return absl::FailedPreconditionError("communicator aborted");
  ncclResult_t state = ncclSuccess;
  ncclResult_t res = ncclCommGetAsyncError(comm_, &state);
  if (res != ncclSuccess) return NcclError(res, "ncclCommGetAsyncError", comm_);
  if (!NcclAccepted(state)) return NcclError(state, "communicator", comm_);
  return absl::OkStatus();
}

void NcclCommunicator::Abort() {
  if (aborted_) return;
  aborted_ = true;
  ncclCommAbort(comm_);
}

absl::Status NcclCommunicator::Enqueued(ncclResult_t res) {
  if (t_group_depth > 0) {
    t_group_comms.push_back(this);
    return absl::OkStatus();
  }
  return res == ncclInProgress ? WaitEnqueued() : absl::OkStatus();
}

absl::StatusOr<UniqueId> CudaDevice::NewUniqueId() {
  ncclUniqueId id;
  ncclResult_t res = ncclGetUniqueId(&id);
  if (res != ncclSuccess) return NcclError(res, "ncclGetUniqueId", nullptr);
  UniqueId out;
  static_assert(sizeof(id) == kUniqueIdBytes, "ncclUniqueId size");
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

absl::Status CudaDevice::GroupStart() {
  ncclResult_t res = ncclGroupStart();
  if (res != ncclSuccess) return NcclError(res, "ncclGroupStart", nullptr);
  ++t_group_depth;
  return absl::OkStatus();
}

absl::Status CudaDevice::GroupEnd() {
  ncclResult_t res = ncclGroupEnd();
  if (--t_group_depth > 0)
    return NcclAccepted(res) ? absl::OkStatus() : NcclError(res, "ncclGroupEnd", nullptr);
  std::vector<NcclCommunicator*> comms;
  comms.swap(t_group_comms);
  if (!NcclAccepted(res)) return NcclError(res, "ncclGroupEnd", nullptr);
  if (res == ncclSuccess) return absl::OkStatus();
  for (NcclCommunicator* comm : comms) ARD_RETURN_IF_ERROR(comm->WaitEnqueued());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> CudaDevice::InitCommunicators(
    const UniqueId& id, int size, const std::vector<CommRank>& local, absl::Duration timeout) {
  ncclUniqueId nccl_id;
  std::memcpy(&nccl_id, id.data(), sizeof(nccl_id));
  std::vector<ncclComm_t> comms(local.size(), nullptr);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // nonblocking: a failed peer can be aborted instead of hanging
  auto abort_all = [&] {
    for (ncclComm_t c : comms) {
      if (c != nullptr) ncclCommAbort(c);
    }
  };
  // Every check before ncclGroupStart: a return inside the group would leave it open on this
  // thread, deferring every later NCCL call of the thread into a group that never ends.
  for (const CommRank& r : local) ARD_RETURN_IF_ERROR(CheckDevice(r.device));
  ncclResult_t res = ncclGroupStart();
  if (res != ncclSuccess) return NcclError(res, "ncclGroupStart", nullptr);
  auto close_and_abort = [&](absl::Status status) {
    ncclGroupEnd();
    abort_all();
    return status;
  };
  for (size_t i = 0; i < local.size(); ++i) {
    if (cudaError_t err = cudaSetDevice(local[i].device); err != cudaSuccess) {
      return close_and_abort(CudaError(err, "cudaSetDevice", local[i].device));
    }
    res = ncclCommInitRankConfig(&comms[i], size, nccl_id, local[i].rank, &config);
    if (!NcclAccepted(res)) {
      return close_and_abort(NcclError(res, "ncclCommInitRankConfig", nullptr));
    }
  }
  res = ncclGroupEnd();
  if (!NcclAccepted(res)) {
    abort_all();
    return NcclError(res, "ncclGroupEnd (communicator init)", nullptr);
  }
  absl::Time deadline = absl::Now() + timeout;
  for (size_t i = 0; i < comms.size(); ++i) {
    while (true) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comms[i], &state);
      if (state == ncclSuccess) break;
      if (state != ncclInProgress) {
        absl::Status status = NcclError(state, "ncclCommInitRankConfig", comms[i]);
        abort_all();
        return status;
      }
      if (absl::Now() > deadline) {
        abort_all();
        return absl::DeadlineExceededError(absl::StrCat("NCCL communicator init (", size,
                                                        " ranks) not done within ",
                                                        FormatDurationShort(timeout), "; aborted"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t i = 0; i < comms.size(); ++i) {
    out.push_back(
        std::make_unique<NcclCommunicator>(comms[i], local[i].rank, size, local[i].device));
  }
  return out;
}

}  // namespace ard::gpu::internal
