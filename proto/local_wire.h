// The local wire: frames between a training process (client library) and its host's daemon over a
// SOCK_SEQPACKET Unix socket (DESIGN.md "Local channel"). One frame per seqpacket message:
// FrameHeader, then a fixed-layout payload for the type, then (for some types) a variable tail.
// File descriptors ride as SCM_RIGHTS on the frames named below. Shared verbatim by client and
// daemon; it depends on nothing but <cstdint>, so the client library stays free of protobuf/Abseil.
//
// Every field is validated by the daemon (daemon/local/frame_codec.h); a bad frame gets an ERROR
// frame naming the field, never a crash. All integers are host byte order (same machine).
//
// Conversation:
//   client                                   daemon
//   HELLO (+ fd: first arena segment)   ->
//                                       <-   WELCOME (+ fd: first result segment, read-only)
//                                            once every rank of the job registered, or ERROR
//   ADD_SEGMENT (+ fd)                  ->   grows the client's input arena (no reply)
//   SUBMIT                              ->
//                                       <-   RESULT_SEGMENT (+ fd) before a COMPLETE that needs it
//                                       <-   COMPLETE (same request_id)
//   RELEASE                             ->   result read, the daemon may reuse its slot
//                                       <-   NOTIFY: the job failed (a rank died, ...); any time
//   GPU_UNREGISTER (GPU path, below)    ->
//                                       <-   GPU_UNREGISTERED: the staging memory may be freed
//   BYE                                 ->   (or closing the socket: same cleanup)
//
// Details both sides rely on:
//  - RELEASE, BYE and GPU_UNREGISTER have no payload (payload_bytes 0); RELEASE carries the
//    COMPLETE's request_id.
//  - Input segment 0 is the one passed with HELLO; ADD_SEGMENT indexes continue at 1, and an
//    ADD_SEGMENT is always sent before any SUBMIT that names its index.
//  - A COMPLETE with an error code has bytes 0 (nothing to read or release).
//  - An ERROR whose request_id names a SUBMIT fails that request (the daemon never reads its
//    input afterwards); an ERROR with request_id 0 after WELCOME is fatal for the client.
//  - NOTIFY with a non-zero code: the job failed, every pending and later request fails with it;
//    code 0 is informational. An elastic job's generation ends with NOTIFY ABORTED (a rank or host
//    was lost: re-register with a new HELLO); NOTIFY 0 with kHostsUpdated as its text tells an
//    elastic job's ranks that others wait to join (re-register at the next commit).
//  - A BYE (clean shutdown) with nothing outstanding ends a rank quietly: the others fail only if
//    they later need it. A socket that closes without BYE fails the job on every other rank.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ard::wire {

inline constexpr uint32_t kMagic = 0x31445241;  // "ARD1" in memory on little-endian
inline constexpr uint16_t kVersion = 1;

// Limits a frame may not exceed (the daemon rejects larger values).
inline constexpr size_t kMaxFrameBytes = 128 * 1024;  // whole seqpacket message
inline constexpr size_t kJobNameBytes = 64;           // including the NUL
inline constexpr size_t kTensorNameBytes = 256;       // including the NUL
inline constexpr int kMaxDims = 8;
inline constexpr uint32_t kMaxSegments = 64;          // per arena (input or result)
inline constexpr uint32_t kMaxSplits = 4096;          // alltoall splits = world size at most
inline constexpr uint32_t kMaxMessageBytes = 2048;    // error text in COMPLETE/ERROR/NOTIFY
inline constexpr uint64_t kMaxTensorBytes = (1ull << 32) - 1;  // below 4 GiB, as DESIGN.md says
inline constexpr uint64_t kSlotAlignment = 64;        // offsets of tensors in arenas
inline constexpr char kHostsUpdated[] = "hosts updated";  // NOTIFY 0 text (elastic jobs)

enum class MsgType : uint16_t {
  kHello = 1,
  kWelcome = 2,
  kAddSegment = 3,
  kSubmit = 4,
  kComplete = 5,
  kRelease = 6,
  kNotify = 7,
  kBye = 8,
  kError = 9,
  kResultSegment = 10,
  // GPU path (issue 6; see "GPU path" below). Numbers from 20.
  kGpuRegister = 20,      // client -> daemon, once per process: staging arena + event pool
  kGpuRegistered = 21,    // daemon -> client: the GPU_REGISTER was accepted (no payload)
  kGpuSubmit = 22,        // client -> daemon: a SUBMIT whose input lies in the GPU staging arena
  kGpuUnregister = 23,    // client -> daemon, before BYE: the process will free its staging
  kGpuUnregistered = 24,  // daemon -> client: it no longer touches that memory (no payload)
};

enum class Collective : uint32_t {
  kAllreduce = 1,
  kAllgather = 2,
  kBroadcast = 3,
  kAlltoall = 4,
  kReducescatter = 5,
  kBarrier = 6,
  kJoin = 7,
};

enum class DataType : uint32_t {
  kUint8 = 1,
  kInt8 = 2,
  kUint16 = 3,
  kInt16 = 4,
  kInt32 = 5,
  kInt64 = 6,
  kFloat16 = 7,
  kBfloat16 = 8,
  kFloat32 = 9,
  kFloat64 = 10,
  kBool = 11,
};

enum class ReduceOp : uint32_t {
  kSum = 1,
  kAverage = 2,
  kMin = 3,
  kMax = 4,
  kProduct = 5,
  kAdasum = 6,  // Horovod's Adasum: allreduce of float16/32/64 host tensors only
};

// Status codes in COMPLETE/ERROR/NOTIFY: the numbering of absl::StatusCode / grpc::StatusCode.
enum class Code : int32_t {
  kOk = 0,
  kCancelled = 1,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
};

struct FrameHeader {
  uint32_t magic;          // kMagic
  uint16_t version;        // kVersion
  uint16_t type;           // MsgType
  uint32_t payload_bytes;  // bytes after this header (fixed payload + tail)
  uint32_t reserved;       // 0
  uint64_t request_id;     // SUBMIT/COMPLETE/RELEASE: chosen by the client, unique per process
                           // while in flight; ERROR: the request it answers, 0 for none
};
static_assert(sizeof(FrameHeader) == 24, "wire layout");

// HELLO, client -> daemon, with SCM_RIGHTS: the first input-arena segment (a memfd sealed with
// F_SEAL_SHRINK, so the daemon's mapping can never SIGBUS).
// Rank fields are -1 when the launcher gave none; the daemon then assigns them.
struct Hello {
  char job[kJobNameBytes];  // NUL-terminated; [A-Za-z0-9._-]+; "default" when unset
  int32_t rank;             // global rank, or -1
  int32_t size;             // world size, or -1 (then local_size, then 1)
  int32_t local_rank;       // rank on this host, or -1
  int32_t local_size;       // ranks on this host, or -1
  uint32_t pid;             // informational; the daemon trusts SO_PEERCRED
  // 0: a fixed-size job. >= 1: an elastic job that runs with at least this many ranks; then
  // `size` is its maximum (or -1), `rank` only orders this process among the job's (-1: after the
  // others), local_rank is -1, local_size the launcher's (a new job's first generation on this
  // host waits for that many, or settles), and the daemon forms each generation from the ranks
  // present.
  uint32_t elastic_min_np;
  uint64_t segment_bytes;   // size of the segment passed with this frame
};
static_assert(sizeof(Hello) == 96, "wire layout");

// WELCOME, daemon -> client, with SCM_RIGHTS: result segment 0 of the job (read-only fd).
struct Welcome {
  int32_t rank, size, local_rank, local_size, cross_rank, cross_size;
  uint64_t result_segment_bytes;  // size of result segment 0
  uint64_t max_tensor_bytes;      // largest tensor the daemon accepts
  uint32_t job_id;                // daemon-local id, for logs
  uint32_t reserved;
};
static_assert(sizeof(Welcome) == 48, "wire layout");

// ADD_SEGMENT, client -> daemon, with SCM_RIGHTS (sealed memfd); RESULT_SEGMENT, daemon -> client,
// with SCM_RIGHTS (read-only fd). Segment indexes are dense: 0, 1, 2, ...
struct Segment {
  uint32_t index;
  uint32_t reserved;
  uint64_t bytes;
};
static_assert(sizeof(Segment) == 16, "wire layout");

// SUBMIT, client -> daemon. Tail: num_splits int64 (alltoall: rows sent to each rank).
struct Submit {
  uint32_t collective;  // Collective
  uint32_t dtype;       // DataType
  uint32_t reduce_op;   // ReduceOp (allreduce, reducescatter)
  int32_t root_rank;    // broadcast
  double prescale;      // allreduce/reducescatter: input multiplied by this first (1.0: none)
  double postscale;     // ... result multiplied by this last (1.0: none)
  char name[kTensorNameBytes];  // NUL-terminated, non-empty; unique per rank while in flight
  uint32_t ndims;       // 0..kMaxDims
  uint32_t segment;     // input arena segment
  int64_t shape[kMaxDims];
  uint64_t offset;      // of the input in that segment, kSlotAlignment-aligned
  uint64_t bytes;       // input bytes = product(shape) * dtype size; 0 for barrier/join
  int32_t group_id;     // grouped allreduce: same id on every rank, -1 when not grouped
  int32_t group_size;   // tensors in the group
  uint32_t num_splits;  // alltoall: 0 (even split) or world size
  uint32_t reserved;
};
static_assert(sizeof(Submit) == 392, "wire layout");

// COMPLETE, daemon -> client. Tail: num_splits int64 (alltoall: rows received from each rank),
// then message_bytes of UTF-8 error text (no NUL).
struct Complete {
  int32_t code;          // Code
  uint32_t message_bytes;
  uint32_t segment;      // result segment (when bytes > 0)
  uint32_t ndims;
  uint64_t offset;
  uint64_t bytes;        // result bytes; 0: nothing to read and no RELEASE needed
  int64_t shape[kMaxDims];
  int32_t join_last_rank;  // join: the last rank that joined
  uint32_t num_splits;
};
static_assert(sizeof(Complete) == 104, "wire layout");

// ERROR (daemon -> client, answers the frame with header.request_id) and NOTIFY (job-level event).
// Tail: message_bytes of UTF-8 text.
struct Error {
  int32_t code;
  uint32_t message_bytes;
};
static_assert(sizeof(Error) == 8, "wire layout");

// ---- GPU path (issue 6) ----
// A process on a GPU host, after WELCOME, sends one GPU_REGISTER: its device staging arena
// (cuMemAlloc, exported with cuIpcGetMemHandle) and a pool of interprocess events (cuEventCreate
// with CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING, exported with cuIpcGetEventHandle). The
// daemon opens them once (cached per pid, device and handle bytes; closed when the process leaves)
// and answers GPU_REGISTERED, or ERROR with header.request_id echoed (wrong device, stale handle,
// memory the process does not own, pool too large): the error goes to that process only.
// Per tensor: the client copies the input into the arena on the framework's stream, records pool
// event `event` there, and sends GPU_SUBMIT. The daemon's stream waits on that event, reduces,
// writes the result in place (same offset) and records the same event, then sends COMPLETE (bytes
// 0). The client makes the framework's stream wait on the event and copies the result out: the
// host never waits for the GPU.
// Ending: a process that registered sends GPU_UNREGISTER (no payload, a fresh request_id) before
// BYE and frees its arena and events only after GPU_UNREGISTERED (same request_id): the daemon
// sends it once this rank's GPU registration is released and the process's IPC mappings are no
// longer used (CUDA: freeing exported memory before the importer closes it is undefined, and a
// sticky error would poison the daemon's context for every job on that GPU). A daemon that knows
// nothing of the process (no job, no registration) answers at once; an ERROR answer to
// GPU_REGISTER means the daemon keeps nothing of that registration open. Without the answer (the
// connection lost, an ERROR, or no answer within the client's timeout) the client keeps the memory
// allocated until the process exits.
inline constexpr size_t kIpcHandleBytes = 64;   // CU_IPC_HANDLE_SIZE
inline constexpr uint32_t kMaxGpuEvents = 1024;  // tail of GPU_REGISTER fits a frame

// GPU_REGISTER, client -> daemon. Tail: num_events handles of kIpcHandleBytes each.
struct GpuRegister {
  int32_t device;       // CUDA ordinal, as the daemon numbers it (same CUDA_VISIBLE_DEVICES)
  uint32_t num_events;  // 1..kMaxGpuEvents
  uint64_t arena_bytes;
  uint8_t arena_handle[kIpcHandleBytes];
  char pci_bus_id[16];  // "0000:3b:00.0" NUL-padded: lets the daemon check the ordinal's GPU
};
static_assert(sizeof(GpuRegister) == 96, "wire layout");

// GPU_SUBMIT, client -> daemon: a Submit (its segment field unused) then this placement.
struct GpuPlacement {
  uint64_t offset;  // of the input (and result) in the staging arena, kSlotAlignment-aligned
  uint32_t event;   // pool index recorded after the input copy
  uint32_t reserved;
};
static_assert(sizeof(GpuPlacement) == 16, "wire layout");

// Bytes per element of a dtype, 0 for an unknown one.
inline constexpr size_t DataTypeSize(uint32_t dtype) {
  switch (static_cast<DataType>(dtype)) {
    case DataType::kUint8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
    case DataType::kUint16:
    case DataType::kInt16:
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    case DataType::kInt64:
    case DataType::kFloat64:
      return 8;
  }
  return 0;
}

}  // namespace ard::wire
