// The seam between the daemon's GPU orchestration and CUDA/NCCL (DESIGN.md "GPU path"): a narrow
// device interface. `CudaDevice` (cuda_device.cc, built only with CUDA) is a thin layer over the
// CUDA runtime and NCCL; `testing::HostDevice` (testing/host_device.h) is a host-memory test double
// that lets CI run the orchestration (IPC handle caching, event ordering, fusion offsets, group
// calls, communicator abort) without a GPU. The shipped daemon never uses the double.
//
// Semantics every implementation keeps (the CUDA/NCCL ones):
// - Work on a Stream runs in issue order, asynchronously to the caller. Record(e, s) marks e
//   complete when the work issued on s so far is done; Wait(s, e) makes later work on s wait for
//   the most recent Record of e issued before the Wait call (cudaStreamWaitEvent).
// - Memory and Event objects free/close their resource when destroyed (RAII). An opened IPC
//   mapping stays valid until its Memory is destroyed, even if the exporter frees it later.
// - Communicators are nonblocking: a collective returns once enqueued; failures surface through
//   AsyncError(); Abort() never waits for peers, and makes pending and later work fail.
// - A thread that drives several local ranks of one communicator issues their collectives between
//   GroupStart() and GroupEnd() (ncclGroupStart/End), else NCCL may deadlock.
// Thread affinity: a Device may be called from any thread; each Stream and Communicator is used by
// one thread at a time (the job's executor).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/local_wire.h"

namespace ard::gpu {

// Bytes of cudaIpcMemHandle_t / cudaIpcEventHandle_t (CU_IPC_HANDLE_SIZE).
inline constexpr size_t kIpcHandleBytes = 64;
using IpcHandle = std::array<uint8_t, kIpcHandleBytes>;
// Bytes of ncclUniqueId (NCCL_UNIQUE_ID_BYTES).
inline constexpr size_t kUniqueIdBytes = 128;
using UniqueId = std::array<uint8_t, kUniqueIdBytes>;

class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;
  virtual int device() const = 0;
};

class Event {
 public:
  virtual ~Event() = default;
  virtual int device() const = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  virtual int device() const = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int device() const = 0;

  // In place when send == recv. kAverage divides the sum by `average_over` (the number of
  // contributions, which exceeds size() when several processes share a GPU).
  virtual absl::Status Allreduce(const void* send, void* recv, size_t count, wire::DataType dtype,
                                 wire::ReduceOp op, int average_over, Stream& stream) = 0;
  virtual absl::Status Broadcast(const void* send, void* recv, size_t count, wire::DataType dtype,
                                 int root, Stream& stream) = 0;
  // recv holds size() * send_count elements, rank r's at r * send_count.
  virtual absl::Status Allgather(const void* send, void* recv, size_t send_count,
                                 wire::DataType dtype, Stream& stream) = 0;
  // send holds size() * recv_count elements; rank r receives the reduction of block r.
  virtual absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count,
                                     wire::DataType dtype, wire::ReduceOp op, Stream& stream) = 0;
  // OK while healthy; the asynchronous error otherwise (a peer failed, or aborted). Never blocks.
  virtual absl::Status AsyncError() = 0;
  // ncclCommAbort: pending and later operations fail; does not wait for peers. Idempotent.
  virtual void Abort() = 0;
};

// One local rank of a communicator: its rank in the communicator and the GPU it runs on.
struct CommRank {
  int rank = 0;
  int device = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  // "cuda 13.0 nccl 2.28.3" or "host test double": for logs and status.
  virtual std::string Describe() const = 0;
  // GPUs visible to this process; an error when there is no driver or no GPU.
  virtual absl::StatusOr<int> DeviceCount() = 0;

  virtual absl::StatusOr<std::unique_ptr<Memory>> Allocate(int device, size_t bytes) = 0;
  virtual absl::StatusOr<IpcHandle> ExportMemory(const Memory& memory) = 0;
  // Maps another process's allocation on `device`. InvalidArgument for a handle that is not a
  // live allocation on that device.
  virtual absl::StatusOr<std::unique_ptr<Memory>> OpenMemory(int device,
                                                             const IpcHandle& handle) = 0;

  // Interprocess events have timing disabled (cudaEventInterprocess | cudaEventDisableTiming).
  virtual absl::StatusOr<std::unique_ptr<Event>> CreateEvent(int device, bool interprocess) = 0;
  virtual absl::StatusOr<IpcHandle> ExportEvent(const Event& event) = 0;
  virtual absl::StatusOr<std::unique_ptr<Event>> OpenEvent(int device, const IpcHandle& handle) = 0;

  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateStream(int device) = 0;
  virtual absl::Status Record(Event& event, Stream& stream) = 0;
  virtual absl::Status Wait(Stream& stream, Event& event) = 0;
  // Any direction (unified addressing): device <-> device, device <-> host.
  virtual absl::Status CopyAsync(void* dst, const void* src, size_t bytes, Stream& stream) = 0;
  // Sets `bytes` bytes of device memory at `dst` to `value` (cudaMemsetAsync).
  virtual absl::Status MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) = 0;
  // Blocks until the work issued on `stream` is done; its first error otherwise.
  virtual absl::Status Synchronize(Stream& stream) = 0;

  virtual absl::StatusOr<UniqueId> NewUniqueId() = 0;
  // This process's ranks of a communicator of `size` ranks, created together (ncclGroupStart/End
  // around one ncclCommInitRankConfig per local rank, nonblocking), waiting up to `timeout` for
  // every rank of the communicator to join. DeadlineExceeded (and the local ranks aborted) when
  // they do not. Result index = index in `local`.
  virtual absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> InitCommunicators(
      const UniqueId& id, int size, const std::vector<CommRank>& local, absl::Duration timeout) = 0;
  virtual absl::Status GroupStart() = 0;
  virtual absl::Status GroupEnd() = 0;
};

// Whether a dtype can be reduced on a communicator (NCCL: no bool/int16/uint16 reductions).
bool DeviceReductionSupported(wire::DataType dtype);

}  // namespace ard::gpu
