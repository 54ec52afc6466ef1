// NCCL communicators of the real gpu::Device (ARD_WITH_CUDA builds only): their grouped,
// nonblocking init, NCCL groups, state (ncclCommGetAsyncError), finalize, destroy and abort. No
// call here waits: the thread that drives the communicator polls State() with its deadline. The
// collective calls themselves are in nccl_collectives.cc.
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/gpu/cuda_device_internal.h"

namespace ard::gpu::internal {

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

NcclCommunicator::~NcclCommunicator() {
  if (aborted_) return;
  cudaSetDevice(device_);
  if (finalized_) {
    ncclCommDestroy(comm_);  // local once finalized
  } else {
    ncclCommAbort(comm_);  // never finalized: destroy would wait for peers
  }
}

absl::StatusOr<CommState> NcclCommunicator::State() {
  if (aborted_) return absl::FailedPreconditionError("communicator aborted");
  ncclResult_t state = ncclSuccess;
  ncclResult_t res = ncclCommGetAsyncError(comm_, &state);
  if (res != ncclSuccess) return NcclError(res, "ncclCommGetAsyncError", comm_);
  if (state == ncclInProgress) return CommState::kInProgress;
  if (state != ncclSuccess) return NcclError(state, "communicator", comm_);
  if (finalizing_) finalized_ = true;
  return CommState::kReady;
}

absl::Status NcclCommunicator::Finalize() {
  if (aborted_) return absl::FailedPreconditionError("communicator aborted");
  cudaSetDevice(device_);
  ncclResult_t res = ncclCommFinalize(comm_);
  if (!NcclAccepted(res)) return NcclError(res, "ncclCommFinalize", comm_);
  finalizing_ = true;
  return absl::OkStatus();
}

void NcclCommunicator::Abort() {
  if (aborted_) return;
  aborted_ = true;
  cudaSetDevice(device_);
  ncclCommAbort(comm_);
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
  return absl::OkStatus();
}

absl::Status CudaDevice::GroupEnd() {
  ncclResult_t res = ncclGroupEnd();  // ncclInProgress: the communicators' State() says when done
  if (!NcclAccepted(res)) return NcclError(res, "ncclGroupEnd", nullptr);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> CudaDevice::InitCommunicators(
    const UniqueId& id, int size, const std::vector<CommRank>& local) {
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
  std::vector<std::unique_ptr<Communicator>> out;  // in progress until every rank joined
  for (size_t i = 0; i < comms.size(); ++i) {
    out.push_back(
        std::make_unique<NcclCommunicator>(comms[i], local[i].rank, size, local[i].device));
  }
  return out;
}

}  // namespace ard::gpu::internal
