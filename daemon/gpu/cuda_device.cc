// The CUDA runtime + NCCL gpu::Device (ARD_WITH_CUDA builds only). Compiled and linked in CI;
// exercised only on a GPU host (tests/gpu).
#include "daemon/gpu/cuda_device.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/collectives/half_float.h"
#include "daemon/common/status_macros.h"

namespace ard::gpu {
namespace {

absl::Status CudaError(cudaError_t err, const char* call, int device) {
  cudaGetLastError();  // clear a non-sticky error so later calls start clean
  return absl::InternalError(absl::StrCat(call, " on GPU ", device, ": ", cudaGetErrorString(err)));
}

#define ARD_CUDA_RETURN(call, device)                                       \
  do {                                                                      \
    cudaError_t ard_err_ = (call);                                          \
    if (ard_err_ != cudaSuccess) return CudaError(ard_err_, #call, device); \
  } while (0)

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

// Nonblocking communicators return ncclInProgress for work that was accepted but may not be on its
// stream yet: until ncclCommGetAsyncError says ncclSuccess, work queued on the stream afterwards
// could run before it (see NcclCommunicator::WaitEnqueued).
bool NcclAccepted(ncclResult_t res) { return res == ncclSuccess || res == ncclInProgress; }

class NcclCommunicator;
// The communicators used inside this thread's current ncclGroupStart/End: GroupEnd waits for
// their work to be enqueued when it answers ncclInProgress.
thread_local std::vector<NcclCommunicator*> t_group_comms;
thread_local int t_group_depth = 0;

absl::StatusOr<ncclDataType_t> NcclType(wire::DataType dtype) {
  switch (dtype) {
    case wire::DataType::kUint8:
      return ncclUint8;
    case wire::DataType::kInt8:
      return ncclInt8;
    case wire::DataType::kBool:
      return ncclUint8;  // data movement only
    case wire::DataType::kInt32:
      return ncclInt32;
    case wire::DataType::kInt64:
      return ncclInt64;
    case wire::DataType::kFloat16:
      return ncclFloat16;
    case wire::DataType::kBfloat16:
      return ncclBfloat16;
    case wire::DataType::kFloat32:
      return ncclFloat32;
    case wire::DataType::kFloat64:
      return ncclFloat64;
    default:
      return absl::InvalidArgumentError("dtype not supported by NCCL");
  }
}

class CudaMemory : public Memory {
 public:
  CudaMemory(void* data, size_t size, int device, bool ipc)
      : data_(data), size_(size), device_(device), ipc_(ipc) {}
  ~CudaMemory() override {
    cudaSetDevice(device_);
    if (ipc_) {
      cudaIpcCloseMemHandle(data_);
    } else {
      cudaFree(data_);
    }
  }
  void* data() const override { return data_; }
  size_t size() const override { return size_; }
  int device() const override { return device_; }

 private:
  void* data_;
  size_t size_;
  int device_;
  bool ipc_;
};

class CudaEvent : public Event {
 public:
  CudaEvent(cudaEvent_t event, int device) : event_(event), device_(device) {}
  ~CudaEvent() override {
    cudaSetDevice(device_);
    cudaEventDestroy(event_);
  }
  int device() const override { return device_; }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_;
  int device_;
};

class CudaStream : public Stream {
 public:
  CudaStream(cudaStream_t stream, int device) : stream_(stream), device_(device) {}
  ~CudaStream() override {
    cudaSetDevice(device_);
    cudaStreamDestroy(stream_);
  }
  int device() const override { return device_; }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_;
  int device_;
};

cudaStream_t StreamOf(Stream& stream) { return static_cast<CudaStream&>(stream).get(); }

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device)
      : comm_(comm), rank_(rank), size_(size), device_(device) {}
  ~NcclCommunicator() override {
    if (!aborted_) ncclCommDestroy(comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const override { return device_; }

  absl::Status Allreduce(const void* send, void* recv, size_t count, wire::DataType dtype,
                         wire::ReduceOp op, int average_over, Stream& stream) override {
    auto type = NcclType(dtype);
    if (!type.ok()) return type.status();
    ncclRedOp_t nccl_op = ncclSum;
    bool custom = false;
    switch (op) {
      case wire::ReduceOp::kSum:
        nccl_op = ncclSum;
        break;
      case wire::ReduceOp::kMin:
        nccl_op = ncclMin;
        break;
      case wire::ReduceOp::kMax:
        nccl_op = ncclMax;
        break;
      case wire::ReduceOp::kProduct:
        nccl_op = ncclProd;
        break;
      case wire::ReduceOp::kAverage:
        if (average_over == size_) {
          nccl_op = ncclAvg;
        } else {
          auto premul = PreMulSum(dtype, *type, average_over);
          if (!premul.ok()) return premul.status();
          nccl_op = *premul;
          custom = true;
        }
        break;
    }
    cudaSetDevice(device_);
    ncclResult_t res = ncclAllReduce(send, recv, count, *type, nccl_op, comm_, StreamOf(stream));
    if (custom) ncclRedOpDestroy(nccl_op, comm_);  // allowed once the last use is enqueued
    if (!NcclAccepted(res)) return NcclError(res, "ncclAllReduce", comm_);
    return Enqueued(res);
  }

  absl::Status Broadcast(const void* send, void* recv, size_t count, wire::DataType dtype, int root,
                         Stream& stream) override {
    auto type = NcclType(dtype);
    if (!type.ok()) return type.status();
    cudaSetDevice(device_);
    ncclResult_t res = ncclBroadcast(send, recv, count, *type, root, comm_, StreamOf(stream));
    if (!NcclAccepted(res)) return NcclError(res, "ncclBroadcast", comm_);
    return Enqueued(res);
  }

  absl::Status Allgather(const void* send, void* recv, size_t send_count, wire::DataType dtype,
                         Stream& stream) override {
    auto type = NcclType(dtype);
    if (!type.ok()) return type.status();
    cudaSetDevice(device_);
    ncclResult_t res = ncclAllGather(send, recv, send_count, *type, comm_, StreamOf(stream));
    if (!NcclAccepted(res)) return NcclError(res, "ncclAllGather", comm_);
    return Enqueued(res);
  }

  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count, wire::DataType dtype,
                             wire::ReduceOp op, Stream& stream) override {
    auto type = NcclType(dtype);
    if (!type.ok()) return type.status();
    ncclRedOp_t nccl_op = op == wire::ReduceOp::kMin       ? ncclMin
                          : op == wire::ReduceOp::kMax     ? ncclMax
                          : op == wire::ReduceOp::kProduct ? ncclProd
                          : op == wire::ReduceOp::kAverage ? ncclAvg
                                                           : ncclSum;
    cudaSetDevice(device_);
    ncclResult_t res =
        ncclReduceScatter(send, recv, recv_count, *type, nccl_op, comm_, StreamOf(stream));
    if (!NcclAccepted(res)) return NcclError(res, "ncclReduceScatter", comm_);
    return Enqueued(res);
  }

  // After a nonblocking call answered ncclInProgress: waits until the work is on its stream (the
  // communicator's state leaves ncclInProgress), so what the caller queues next runs after it.
  // An abort from another thread ends the wait.
  absl::Status WaitEnqueued() {
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

  absl::Status AsyncError() override {
    if (aborted_) return absl::FailedPreconditionError("communicator aborted");
    ncclResult_t state = ncclSuccess;
    ncclResult_t res = ncclCommGetAsyncError(comm_, &state);
    if (res != ncclSuccess) return NcclError(res, "ncclCommGetAsyncError", comm_);
    if (!NcclAccepted(state)) return NcclError(state, "communicator", comm_);
    return absl::OkStatus();
  }

  void Abort() override {
    if (aborted_) return;
    aborted_ = true;
    ncclCommAbort(comm_);
  }

 private:
  // A collective call's answer: inside a group GroupEnd waits for the enqueue; outside, now.
  absl::Status Enqueued(ncclResult_t res) {
    if (t_group_depth > 0) {
      t_group_comms.push_back(this);
      return absl::OkStatus();
    }
    return res == ncclInProgress ? WaitEnqueued() : absl::OkStatus();
  }

  // Average over a number of contributions other than the communicator size (several processes
  // share a GPU): sum of x * (1 / n), float types only.
  absl::StatusOr<ncclRedOp_t> PreMulSum(wire::DataType dtype, ncclDataType_t type, int n) {
    alignas(8) unsigned char scalar[8] = {};
    double factor = 1.0 / n;
    switch (dtype) {
      case wire::DataType::kFloat64:
        std::memcpy(scalar, &factor, 8);
        break;
      case wire::DataType::kFloat32: {
        float f = static_cast<float>(factor);
        std::memcpy(scalar, &f, 4);
        break;
      }
      case wire::DataType::kFloat16: {
        uint16_t h = collectives::FloatToHalf(static_cast<float>(factor));
        std::memcpy(scalar, &h, 2);
        break;
      }
      case wire::DataType::kBfloat16: {
        uint16_t h = collectives::FloatToBfloat16(static_cast<float>(factor));
        std::memcpy(scalar, &h, 2);
        break;
      }
      default:
        return absl::UnimplementedError(
            "integer average over several processes per GPU is not supported on the GPU path");
    }
    ncclRedOp_t op;
    ncclResult_t res = ncclRedOpCreatePreMulSum(&op, scalar, type, ncclScalarHostImmediate, comm_);
    if (res != ncclSuccess) return NcclError(res, "ncclRedOpCreatePreMulSum", comm_);
    return op;
  }

  ncclComm_t comm_;
  int rank_;
  int size_;
  int device_;
  std::atomic<bool> aborted_{false};  // Abort may come from another thread
};

class CudaDevice : public Device {
 public:
  // Touches no GPU: contexts are created by the first call that needs one.
  explicit CudaDevice(int count) : count_(count) {}

  std::string Describe() const override {
    int runtime = 0, nccl = 0;
    cudaRuntimeGetVersion(&runtime);
    ncclGetVersion(&nccl);
    return absl::StrCat("cuda ", runtime / 1000, ".", (runtime % 1000) / 10, " nccl ", nccl / 10000,
                        ".", (nccl / 100) % 100, ".", nccl % 100);
  }

  absl::StatusOr<int> DeviceCount() override { return count_; }

  absl::StatusOr<std::unique_ptr<Memory>> Allocate(int device, size_t bytes) override {
    ARD_RETURN_IF_ERROR(CheckDevice(device));
    ARD_CUDA_RETURN(cudaSetDevice(device), device);
    void* data = nullptr;
    ARD_CUDA_RETURN(cudaMalloc(&data, bytes), device);
    return std::unique_ptr<Memory>(new CudaMemory(data, bytes, device, false));
  }

  absl::StatusOr<IpcHandle> ExportMemory(const Memory& memory) override {
    cudaIpcMemHandle_t h;
    ARD_CUDA_RETURN(cudaSetDevice(memory.device()), memory.device());
    ARD_CUDA_RETURN(cudaIpcGetMemHandle(&h, memory.data()), memory.device());
    IpcHandle out;
    static_assert(sizeof(h) == kIpcHandleBytes, "cudaIpcMemHandle_t size");
    std::memcpy(out.data(), &h, sizeof(h));
    return out;
  }

  absl::StatusOr<std::unique_ptr<Memory>> OpenMemory(int device, const IpcHandle& handle) override {
    ARD_RETURN_IF_ERROR(CheckDevice(device));
    ARD_CUDA_RETURN(cudaSetDevice(device), device);
    cudaIpcMemHandle_t h;
    std::memcpy(&h, handle.data(), sizeof(h));
    void* data = nullptr;
    cudaError_t err = cudaIpcOpenMemHandle(&data, h, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return absl::InvalidArgumentError(
          absl::StrCat("cudaIpcOpenMemHandle on GPU ", device, ": ", cudaGetErrorString(err),
                       " (stale handle, or memory this process does not own)"));
    }
    size_t size = 0;
    std::call_once(range_once_, [this] {
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult found;
      if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                           &found) == cudaSuccess &&
          found == cudaDriverEntryPointSuccess) {
        get_range_ = reinterpret_cast<GetRangeFn>(fn);
      }
    });
    if (get_range_ != nullptr) {
      CUdeviceptr base = 0;
      if (get_range_(&base, &size, reinterpret_cast<CUdeviceptr>(data)) != CUDA_SUCCESS) size = 0;
    }
    if (size == 0) {
      cudaIpcCloseMemHandle(data);
      return absl::InternalError("cuMemGetAddressRange failed for an opened IPC mapping");
    }
    return std::unique_ptr<Memory>(new CudaMemory(data, size, device, true));
  }

  absl::StatusOr<std::unique_ptr<Event>> CreateEvent(int device, bool interprocess) override {
    ARD_RETURN_IF_ERROR(CheckDevice(device));
    ARD_CUDA_RETURN(cudaSetDevice(device), device);
    cudaEvent_t event;
    unsigned flags = cudaEventDisableTiming | (interprocess ? cudaEventInterprocess : 0);
    ARD_CUDA_RETURN(cudaEventCreateWithFlags(&event, flags), device);
    return std::unique_ptr<Event>(new CudaEvent(event, device));
  }

  absl::StatusOr<IpcHandle> ExportEvent(const Event& event) override {
    cudaIpcEventHandle_t h;
    ARD_CUDA_RETURN(cudaIpcGetEventHandle(&h, static_cast<const CudaEvent&>(event).get()),
                    event.device());
    IpcHandle out;
    static_assert(sizeof(h) == kIpcHandleBytes, "cudaIpcEventHandle_t size");
    std::memcpy(out.data(), &h, sizeof(h));
    return out;
  }

  absl::StatusOr<std::unique_ptr<Event>> OpenEvent(int device, const IpcHandle& handle) override {
    ARD_RETURN_IF_ERROR(CheckDevice(device));
    ARD_CUDA_RETURN(cudaSetDevice(device), device);
    cudaIpcEventHandle_t h;
    std::memcpy(&h, handle.data(), sizeof(h));
    cudaEvent_t event;
    cudaError_t err = cudaIpcOpenEventHandle(&event, h);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return absl::InvalidArgumentError(
          absl::StrCat("cudaIpcOpenEventHandle on GPU ", device, ": ", cudaGetErrorString(err)));
    }
    return std::unique_ptr<Event>(new CudaEvent(event, device));
  }

  absl::StatusOr<std::unique_ptr<Stream>> CreateStream(int device) override {
    ARD_RETURN_IF_ERROR(CheckDevice(device));
    ARD_CUDA_RETURN(cudaSetDevice(device), device);
    cudaStream_t stream;
    ARD_CUDA_RETURN(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), device);
    return std::unique_ptr<Stream>(new CudaStream(stream, device));
  }

  absl::Status Record(Event& event, Stream& stream) override {
    ARD_CUDA_RETURN(cudaSetDevice(stream.device()), stream.device());
    ARD_CUDA_RETURN(cudaEventRecord(static_cast<CudaEvent&>(event).get(), StreamOf(stream)),
                    stream.device());
    return absl::OkStatus();
  }

  absl::Status Wait(Stream& stream, Event& event) override {
    ARD_CUDA_RETURN(cudaSetDevice(stream.device()), stream.device());
    ARD_CUDA_RETURN(cudaStreamWaitEvent(StreamOf(stream), static_cast<CudaEvent&>(event).get(), 0),
                    stream.device());
    return absl::OkStatus();
  }

  absl::Status CopyAsync(void* dst, const void* src, size_t bytes, Stream& stream) override {
    ARD_CUDA_RETURN(cudaSetDevice(stream.device()), stream.device());
    ARD_CUDA_RETURN(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, StreamOf(stream)),
                    stream.device());
    return absl::OkStatus();
  }

  absl::Status MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) override {
    ARD_CUDA_RETURN(cudaSetDevice(stream.device()), stream.device());
    ARD_CUDA_RETURN(cudaMemsetAsync(dst, value, bytes, StreamOf(stream)), stream.device());
    return absl::OkStatus();
  }

  absl::Status Synchronize(Stream& stream) override {
    ARD_CUDA_RETURN(cudaSetDevice(stream.device()), stream.device());
    ARD_CUDA_RETURN(cudaStreamSynchronize(StreamOf(stream)), stream.device());
    return absl::OkStatus();
  }

  absl::StatusOr<UniqueId> NewUniqueId() override {
    ncclUniqueId id;
    ncclResult_t res = ncclGetUniqueId(&id);
    if (res != ncclSuccess) return NcclError(res, "ncclGetUniqueId", nullptr);
    UniqueId out;
    static_assert(sizeof(id) == kUniqueIdBytes, "ncclUniqueId size");
    std::memcpy(out.data(), &id, sizeof(id));
    return out;
  }

  absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> InitCommunicators(
      const UniqueId& id, int size, const std::vector<CommRank>& local,
      absl::Duration timeout) override;

  absl::Status GroupStart() override {
    ncclResult_t res = ncclGroupStart();
    if (res != ncclSuccess) return NcclError(res, "ncclGroupStart", nullptr);
    ++t_group_depth;
    return absl::OkStatus();
  }

  absl::Status GroupEnd() override {
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

 private:
  using GetRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

  absl::Status CheckDevice(int device) const {
    if (device < 0 || device >= count_) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid device ordinal ", device, " (", count_, " GPUs)"));
    }
    return absl::OkStatus();
  }

  const int count_;
  std::once_flag range_once_;
  GetRangeFn get_range_ = nullptr;  // set once, under range_once_
};

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
        return absl::DeadlineExceededError(
            absl::StrCat("NCCL communicator init (", size, " ranks) not done within ",
                         absl::FormatDuration(timeout), "; aborted"));
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

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> NewCudaDevice() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("no CUDA driver/device: cudaGetDeviceCount: ", cudaGetErrorString(err)));
  }
  if (count == 0) return absl::FailedPreconditionError("no CUDA device");
  return std::unique_ptr<Device>(new CudaDevice(count));
}

}  // namespace ard::gpu
