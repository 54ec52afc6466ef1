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
// - Communicators are nonblocking (NCCL's blocking = 0): init, collectives, GroupEnd and Finalize
//   return once accepted, possibly still in progress (ncclInProgress); work accepted but in
//   progress may not be on its stream yet, so work queued on the stream afterwards could run
//   before it. State() says when it is (kReady) or the communicator's error. Abort() never waits
//   for peers, makes pending work fail, and frees the communicator (ncclCommAbort reclaims it).
// - A thread that drives several local ranks of one communicator issues their collectives between
//   GroupStart() and GroupEnd() (ncclGroupStart/End), else NCCL may deadlock.
// - A stream's error may be sticky (an illegal address, a kernel fault): the device's context is
//   then unusable for the rest of the process (IsStickyError).
// Thread affinity: a Device may be called from any thread; each Stream is used by one thread at a
// time. A Communicator is used, aborted and destroyed only by the thread that drives it (the
// job's executor; DESIGN.md "GPU path"): NCCL frees it on abort, under any call another thread is
// making.
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

// Memory::device() of page-locked host memory (Device::AllocateHost).
inline constexpr int kHostMemory = -1;

class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* data() const = 0;
  virtual size_t size() const = 0;
  virtual int device() const = 0;  // kHostMemory for AllocateHost's
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

// A communicator's answer to State(): every accepted call is on its stream, or not yet.
enum class CommState { kReady, kInProgress };

class Communicator {
 public:
  // ncclCommDestroy once a Finalize completed (State() kReady after it); ncclCommAbort otherwise.
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int device() const = 0;

  // Each collective returns once accepted (see State()). In place when send == recv. kAverage
  // divides the sum by `average_over` (the number of contributions, which exceeds size() when
  // several processes share a GPU).
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
  // ncclCommGetAsyncError: kInProgress while an accepted call (init, a collective, a group, a
  // finalize) is not yet on its stream or done; kReady when it is; the asynchronous error
  // otherwise (a peer failed, or the communicator was aborted). Never blocks.
  virtual absl::StatusOr<CommState> State() = 0;
  // OK unless State() reports an error (in progress counts as healthy).
  absl::Status AsyncError() { return State().status(); }
  // ncclCommFinalize: flushes this rank's outstanding operations so peers get what they still need
  // from it; done when State() says kReady. The graceful end, before destruction.
  virtual absl::Status Finalize() = 0;
  // ncclCommAbort: pending and later operations fail; does not wait for peers; frees the
  // communicator's state. Idempotent. The failure path only (peers may be left mid-collective).
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
  // "2.28.3": what hosts compare before one NCCL communicator spans them ("" without NCCL).
  virtual std::string NcclVersion() const = 0;
  // The first sticky error a call on any of this process's GPUs returned (OK: none): that GPU's
  // context is unusable until the process exits. Cheap; any thread.
  virtual absl::Status Lost() const = 0;
  // GPUs visible to this process; an error when there is no driver or no GPU.
  virtual absl::StatusOr<int> DeviceCount() = 0;
  // Creates every visible GPU's context now (cudaInitDevice). CUDA creates a context at the first
  // call that needs one, which takes hundreds of milliseconds per GPU: the daemon calls this at
  // start so that no later call (the control loop's IPC opens at GPU_REGISTER) pays for it.
  virtual absl::Status InitContexts() = 0;

  virtual absl::StatusOr<std::unique_ptr<Memory>> Allocate(int device, size_t bytes) = 0;
  // Page-locked host memory (cudaHostAlloc, portable): a copy between it and a GPU runs
  // asynchronously on its stream by DMA, where a copy from pageable memory is staged through a
  // driver buffer and blocks the calling thread.
  virtual absl::StatusOr<std::unique_ptr<Memory>> AllocateHost(size_t bytes) = 0;
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
  // Blocks until the work issued on `stream` is done; its first error otherwise. Tests and tools
  // only: the daemon polls (Query) with a deadline instead.
  virtual absl::Status Synchronize(Stream& stream) = 0;
  // cudaStreamQuery: true when the work issued on `stream` is done, false while it runs; the
  // stream's first error otherwise. Never blocks.
  virtual absl::StatusOr<bool> Query(Stream& stream) = 0;

  virtual absl::StatusOr<UniqueId> NewUniqueId() = 0;
  // This process's ranks of a communicator of `size` ranks, created together (ncclGroupStart/End
  // around one ncclCommInitRankConfig per local rank, nonblocking). Returns at once: each is
  // kInProgress until every rank of the communicator joined; the caller polls State() with its
  // deadline and aborts them when it passes. The calling thread drives them. Result index = index
  // in `local`.
  virtual absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> InitCommunicators(
      const UniqueId& id, int size, const std::vector<CommRank>& local) = 0;
  virtual absl::Status GroupStart() = 0;
  // OK once accepted: the group's communicators may be kInProgress (poll State()).
  virtual absl::Status GroupEnd() = 0;
};

// Whether a dtype can be reduced on a communicator (NCCL: no bool/int16/uint16 reductions).
bool DeviceReductionSupported(wire::DataType dtype);

// For tests and tools that drive communicators on one thread without an abort flag (the daemon's
// GpuJob polls with its own deadline and flag): waits up to `timeout` until every communicator
// says kReady; on an error or the deadline the communicators are aborted.
absl::Status AwaitReady(const std::vector<std::unique_ptr<Communicator>>& comms,
                        absl::Duration timeout);
// InitCommunicators, then AwaitReady.
absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> InitCommunicatorsAndWait(
    Device& device, const UniqueId& id, int size, const std::vector<CommRank>& local,
    absl::Duration timeout);

// A device error that poisons the process's context on that GPU (cudaErrorIllegalAddress and the
// other sticky errors): every later call on it fails until the process exits.
absl::Status StickyError(absl::Status status);
bool IsStickyError(const absl::Status& status);

}  // namespace ard::gpu
