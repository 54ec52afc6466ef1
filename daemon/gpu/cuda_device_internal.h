// What the real CUDA/NCCL device's source files share (ARD_WITH_CUDA builds only): error
// wrapping, the RAII CUDA handles, NcclCommunicator and CudaDevice. cuda_device.cc holds memory,
// IPC, events, streams and copies; nccl_communicator.cc communicator init, groups, async errors
// and abort; nccl_collectives.cc the collective calls. Not an interface: callers use
// NewCudaDevice() (cuda_device.h). Threads as in gpu::Device (device.h).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/gpu/device.h"

namespace ard::gpu::internal {

absl::Status CudaError(cudaError_t err, const char* call, int device);

#define ARD_CUDA_RETURN(call, device)                                       \
  do {                                                                      \
    cudaError_t ard_err_ = (call);                                          \
    if (ard_err_ != cudaSuccess) return CudaError(ard_err_, #call, device); \
  } while (0)

absl::Status NcclError(ncclResult_t res, const char* call, ncclComm_t comm);

// Nonblocking communicators return ncclInProgress for work that was accepted but may not be on its
// stream yet: until ncclCommGetAsyncError says ncclSuccess, work queued on the stream afterwards
// could run before it (the caller polls State()).
inline bool NcclAccepted(ncclResult_t res) { return res == ncclSuccess || res == ncclInProgress; }

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

// cudaHostAlloc'd (page-locked, portable) host memory.
class CudaHostMemory : public Memory {
 public:
  CudaHostMemory(void* data, size_t size) : data_(data), size_(size) {}
  ~CudaHostMemory() override { cudaFreeHost(data_); }
  void* data() const override { return data_; }
  size_t size() const override { return size_; }
  int device() const override { return kHostMemory; }

 private:
  void* data_;
  size_t size_;
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

inline cudaStream_t StreamOf(Stream& stream) { return static_cast<CudaStream&>(stream).get(); }

// One rank of a nonblocking NCCL communicator. Called only by the thread that drives it (see
// device.h): no call here waits, so that thread polls State() with its own deadline.
class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size, int device)
      : comm_(comm), rank_(rank), size_(size), device_(device) {}
  ~NcclCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const override { return device_; }

  absl::Status Allreduce(const void* send, void* recv, size_t count, wire::DataType dtype,
                         wire::ReduceOp op, int average_over, Stream& stream) override;
  absl::Status Broadcast(const void* send, void* recv, size_t count, wire::DataType dtype, int root,
                         Stream& stream) override;
  absl::Status Allgather(const void* send, void* recv, size_t send_count, wire::DataType dtype,
                         Stream& stream) override;
  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count, wire::DataType dtype,
                             wire::ReduceOp op, Stream& stream) override;

  absl::StatusOr<CommState> State() override;
  absl::Status Finalize() override;
  void Abort() override;

 private:
  // Average over a number of contributions other than the communicator size (several processes
  // share a GPU): sum of x * (1 / n), float types only.
  absl::StatusOr<ncclRedOp_t> PreMulSum(wire::DataType dtype, ncclDataType_t type, int n);

  ncclComm_t comm_;
  int rank_;
  int size_;
  int device_;
  bool aborted_ = false;
  bool finalizing_ = false;
  bool finalized_ = false;  // State() said kReady after Finalize: destroy, not abort
};

class CudaDevice : public Device {
 public:
  // Touches no GPU: InitContexts creates the contexts (else the first call that needs one).
  explicit CudaDevice(int count) : count_(count) {}

  std::string Describe() const override;
  std::string NcclVersion() const override;
  absl::Status Lost() const override;
  absl::StatusOr<int> DeviceCount() override { return count_; }
  absl::Status InitContexts() override;

  // cuda_device.cc
  absl::StatusOr<std::unique_ptr<Memory>> Allocate(int device, size_t bytes) override;
  absl::StatusOr<std::unique_ptr<Memory>> AllocateHost(size_t bytes) override;
  absl::StatusOr<IpcHandle> ExportMemory(const Memory& memory) override;
  absl::StatusOr<std::unique_ptr<Memory>> OpenMemory(int device, const IpcHandle& handle) override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent(int device, bool interprocess) override;
  absl::StatusOr<IpcHandle> ExportEvent(const Event& event) override;
  absl::StatusOr<std::unique_ptr<Event>> OpenEvent(int device, const IpcHandle& handle) override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream(int device) override;
  absl::Status Record(Event& event, Stream& stream) override;
  absl::Status Wait(Stream& stream, Event& event) override;
  absl::Status CopyAsync(void* dst, const void* src, size_t bytes, Stream& stream) override;
  absl::Status MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) override;
  absl::Status Synchronize(Stream& stream) override;
  absl::StatusOr<bool> Query(Stream& stream) override;

  // nccl_communicator.cc
  absl::StatusOr<UniqueId> NewUniqueId() override;
  absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> InitCommunicators(
      const UniqueId& id, int size, const std::vector<CommRank>& local) override;
  absl::Status GroupStart() override;
  absl::Status GroupEnd() override;

 private:
  using GetRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

  absl::Status CheckDevice(int device) const;

  const int count_;
  std::once_flag range_once_;
  GetRangeFn get_range_ = nullptr;  // set once, under range_once_
};

}  // namespace ard::gpu::internal
