/* allreduced client library: the C API a training process (TensorFlow op, CLI bench, tests) uses
 * to hand tensors to its host's allreduced daemon (DESIGN.md "Processes and channels", "Shared
 * memory"). Protocol: proto/local_wire.h; enum values below (collective, dtype, reduce_op, codes)
 * are those of that header.
 *
 * Dependencies: libc, libstdc++, pthread only. libard_client.so exports exactly the ard_* symbols
 * below (everything else is hidden), so it can be loaded next to TensorFlow's protobuf/Abseil.
 *
 * Lifecycle of a client:
 *   1. ard_options_init + ard_client_create: connects, registers (HELLO), waits for the job to form
 *      (WELCOME), starts one receiver thread (it reads the daemon's answers while callbacks are in
 *      use; a thread in ard_wait reads its own, so its answer wakes it directly).
 *   2. ard_submit from any number of threads; each accepted submit yields a handle that completes
 *      exactly once: through its callback (on the receiver thread) or through ard_wait.
 *   3. ard_release once per completed handle (the result's memory stays readable until then).
 *   4. ard_client_destroy: cancels what is still pending and frees everything.
 * Errors: every fallible call returns a code (ARD_OK = 0, else another ARD_* code, absl's
 * numbering) and, where it takes an `err` buffer, a one-line message (NUL-terminated, truncated to
 * err_len; err may be NULL). No call throws, logs, or touches global state.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define ARD_API __attribute__((visibility("default")))
#else
#define ARD_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* An opaque connected client. Thread-safe except where a function says otherwise. */
typedef struct ard_client ard_client;

/* The numbers a caller passes in ard_request or reads in results. Each list is the wire's enum of
 * the same meaning (proto/local_wire.h; client.cc checks at compile time that they agree). */

/* Status codes (wire::Code, i.e. absl::StatusCode's numbering). */
enum {
  ARD_OK = 0,
  ARD_CANCELLED = 1,
  ARD_INVALID_ARGUMENT = 3,
  ARD_DEADLINE_EXCEEDED = 4,
  ARD_NOT_FOUND = 5,
  ARD_ALREADY_EXISTS = 6,
  ARD_PERMISSION_DENIED = 7,
  ARD_RESOURCE_EXHAUSTED = 8,
  ARD_FAILED_PRECONDITION = 9,
  ARD_ABORTED = 10,
  ARD_OUT_OF_RANGE = 11,
  ARD_UNIMPLEMENTED = 12,
  ARD_INTERNAL = 13,
  ARD_UNAVAILABLE = 14,
  /* Not a status: ard_wait's "timed out, the request is still pending" (distinct from a request
   * that completed with ARD_DEADLINE_EXCEEDED). */
  ARD_PENDING = -1,
};

/* ard_request.collective (wire::Collective). */
enum {
  ARD_ALLREDUCE = 1,
  ARD_ALLGATHER = 2,
  ARD_BROADCAST = 3,
  ARD_ALLTOALL = 4,
  ARD_REDUCESCATTER = 5,
  ARD_BARRIER = 6,
  ARD_JOIN = 7,
};

/* ard_request.dtype (wire::DataType). */
enum {
  ARD_UINT8 = 1,
  ARD_INT8 = 2,
  ARD_UINT16 = 3,
  ARD_INT16 = 4,
  ARD_INT32 = 5,
  ARD_INT64 = 6,
  ARD_FLOAT16 = 7,
  ARD_BFLOAT16 = 8,
  ARD_FLOAT32 = 9,
  ARD_FLOAT64 = 10,
  ARD_BOOL = 11,
};

/* ard_request.reduce_op (wire::ReduceOp). */
enum {
  ARD_SUM = 1,
  ARD_AVERAGE = 2,
  ARD_MIN = 3,
  ARD_MAX = 4,
  ARD_PRODUCT = 5,
  ARD_ADASUM = 6, /* ARD_FLOAT16/32/64 host memory only (docs/user-guide.md "Adasum") */
};

/* How to connect. Fields left at their ard_options_init value come from the environment:
 *   socket_path  NULL -> $ALLREDUCED_SOCKET, else "/run/allreduced/allreduced.sock"
 *   job          NULL -> $ALLREDUCED_JOB, else the launcher's name for this launch, else "default"
 *                (see ard_client_create; [A-Za-z0-9._-], at most 63 bytes)
 *   rank, size, local_rank, local_size   -1 -> the first launcher family with a rank or size set,
 *                taken as a whole: ALLREDUCED_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE};
 *                OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}; PMI_RANK/PMI_SIZE with
 *                MPI_LOCALRANKID/MPI_LOCALNRANKS; SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID with
 *                SLURM_NTASKS_PER_NODE when it is a plain integer; HOROVOD_{RANK,SIZE,LOCAL_RANK,
 *                LOCAL_SIZE}. Still -1 when unknown (the daemon then assigns ranks).
 *   timeout_ms   0 -> $ALLREDUCED_INIT_TIMEOUT_MS, else 60000: how long create waits for the job
 *                to form; negative: forever.
 *   arena_segment_bytes  0 -> $ALLREDUCED_ARENA_SEGMENT_BYTES, else 64 MiB: first input segment.
 *   arena_max_bytes      0 -> $ALLREDUCED_ARENA_MAX_BYTES, else 16 GiB: cap on all input segments.
 * GPU path only, from the environment (no option fields): $ALLREDUCED_GPU_ARENA_BYTES (default
 * 64 MiB, at least 4096) sizes the device staging arena, $ALLREDUCED_GPU_EVENTS (default 64,
 * 1..1024; the daemon's max_gpu_event_pool may allow fewer) the interprocess event pool; both are
 * created at the first ard_submit_device. $ALLREDUCED_WAIT_SPIN_US (default 0: off; at most
 * 10000): how long a thread in ard_wait polls for its answer before it sleeps (it pays only when
 * answers come within that time and cores are idle; after a miss the next 32 waits sleep at
 * once). A bad value fails ard_client_create with ARD_INVALID_ARGUMENT naming the variable.
 * The strings are only read during ard_client_create. */
typedef struct {
  const char* socket_path;
  const char* job;
  int rank, size, local_rank, local_size;
  int timeout_ms;
  uint64_t arena_segment_bytes;
  uint64_t arena_max_bytes;
} ard_options;

/* Fills `options` with the "take it from the environment" values above. Any thread. */
ARD_API void ard_options_init(ard_options* options);

/* Connects to the daemon, registers this process with its job and waits (up to the timeout) until
 * every rank of the job has registered. On success returns 0 and stores a client the caller owns
 * (free with ard_client_destroy). Otherwise returns the code (e.g. ARD_UNAVAILABLE when no daemon
 * listens, ARD_DEADLINE_EXCEEDED when the job did not form, the daemon's code when it refused),
 * stores NULL and writes a message to err. Reads the environment (getenv): do not call it while
 * another thread calls setenv.
 * The job name is what keeps two jobs on one daemon apart: options->job, else $ALLREDUCED_JOB,
 * else the identity of the launch, from the launcher whose rank variables were read (every rank of
 * one launch gets the same name, two launches different ones):
 *   Slurm     "slurm-<SLURM_JOB_ID>.<SLURM_STEP_ID>"
 *   Open MPI  "ompi-<PMIX_NAMESPACE>" (else OMPI_MCA_ess_base_jobid, OMPI_MCA_orte_ess_jobid)
 *   PMI       "pmi-<PMI_JOBID or PMI_KVSNAME>", else the Slurm step srun started; MPICH's and
 *             Intel MPI's Hydra export neither: set ALLREDUCED_JOB with them
 *   Horovod   "horovod-<HOROVOD_GLOO_RENDEZVOUS_ADDR>-<HOROVOD_GLOO_RENDEZVOUS_PORT>"
 * (at most 48 bytes: an id with other characters or a longer one is shortened and its hash added).
 * Without any of these a process alone in its job (no size, rank or local rank above one process)
 * uses "default"; a process of a multi-rank job is refused with ARD_INVALID_ARGUMENT, naming the
 * launcher found and asking for ALLREDUCED_JOB. ard_client_job returns the name in use. */
ARD_API int ard_client_create(const ard_options* options, ard_client** out, char* err,
                              size_t err_len);

/* The job name this client registered with (see ard_client_create), e.g. for the process-set
 * sub-jobs "<job>.ps<id>" of the TensorFlow plugin. Valid until ard_client_destroy. Any thread. */
ARD_API const char* ard_client_job(const ard_client* client);

/* 1 once the daemon said that ranks wait to join this elastic job ($ALLREDUCED_ELASTIC_MIN_NP):
 * the job re-forms, larger, when its ranks register again (a new client). Else 0. Any thread. */
ARD_API int ard_client_hosts_updated(const ard_client* client);

/* This process's place in the job, as the daemon assigned it (cross_* = among hosts). */
typedef struct {
  int rank, size, local_rank, local_size, cross_rank, cross_size;
} ard_topology;

/* Copies the topology received at registration. Any thread; never blocks. */
ARD_API void ard_client_topology(const ard_client* client, ard_topology* out);

/* One collective on one tensor. Initialise with ard_request_init, then set what applies.
 *   collective   ARD_ALLREDUCE .. ARD_JOIN; dtype ARD_UINT8 .. ARD_BOOL;
 *   reduce_op    ARD_SUM .. ARD_ADASUM (allreduce; reducescatter: not ARD_ADASUM); root_rank:
 *                broadcast;
 *   prescale/postscale  allreduce/reducescatter factors (1.0: none);
 *   name         non-empty, < 256 bytes, unique among this rank's requests in flight; the same
 *                name on every rank identifies the tensor;
 *   ndims/shape  0..8 dimensions; bytes must equal product(shape) * dtype size for tensor
 *                collectives, and be 0 for barrier and join (data may then be NULL);
 *   data         the input, copied during ard_submit (the caller may reuse it on return),
 *                unless it lies in an ard_alloc buffer (see there: read in place, no copy);
 *   group_id/group_size  grouped allreduce (-1: not grouped);
 *   num_splits/splits    alltoall: 0 (even split) or one row count per rank. */
typedef struct {
  int collective, dtype, reduce_op, root_rank;
  double prescale, postscale;
  const char* name;
  int ndims;
  const int64_t* shape;
  const void* data;
  uint64_t bytes;
  int group_id, group_size;
  int num_splits;
  const int64_t* splits;
} ard_request;

/* Zeroes `request`, then sets prescale = postscale = 1.0 and group_id = -1. Any thread. */
ARD_API void ard_request_init(ard_request* request);

/* The outcome of a handle. code/message: 0 and "" on success. On success data/bytes is the result
 * (read-only, in the job's result arena; bytes may be 0), with its shape, alltoall's received
 * splits, and join's last rank. Every pointer stays valid until ard_release(handle) or
 * ard_client_destroy, whichever comes first. */
typedef struct {
  int code;
  const char* message;
  int ndims;
  int64_t shape[8];
  const void* data;
  uint64_t bytes;
  int num_splits;
  const int64_t* splits;
  int join_last_rank;
} ard_result;

/* Completion callback. Runs exactly once per accepted submit, on the client thread that read its
 * answer: the client's receiver thread, or a thread inside ard_wait (which reads the daemon's
 * answers itself while it waits), or, for requests still pending then, the thread calling
 * ard_client_destroy. It must not
 * block and must not call ard_wait or ard_client_destroy; it may call ard_release. The `result`
 * struct itself is only valid during the call (copy it); the memory it points to lives until
 * ard_release. */
typedef void (*ard_done_fn)(void* user, uint64_t handle, const ard_result* result);

/* Validates `request`, copies its data into the input arena (growing the arena if needed; not
 * when the data lies in an ard_alloc buffer) and
 * sends it to the daemon. Returns 0 and the handle (unique, increasing) when accepted: it will then
 * complete exactly once, through `done(user, ...)` when done is not NULL, else through ard_wait.
 * Otherwise returns a code, writes err and nothing was sent: ARD_INVALID_ARGUMENT for misuse,
 * ARD_RESOURCE_EXHAUSTED when the arena cap is reached, or the job's failure (after a NOTIFY or a
 * lost connection) for every later submit. Thread-safe; blocks only while the socket is full. */
ARD_API int ard_submit(ard_client* client, const ard_request* request, ard_done_fn done,
                       void* user, uint64_t* handle, char* err, size_t err_len);

/* Tensors built in shared memory: a buffer of at least `bytes` (1..4 GiB - 1) in this client's
 * input arena, 64-byte aligned, zero-filled when first touched, for the caller to build tensors
 * in. A request whose data lies in such a buffer at a multiple of 64 bytes from its start (one
 * tensor, or several packed at 64-byte offsets) is not copied by ard_submit: the daemon reads it
 * where it lies, so the caller must not write that range until the handle completes (it may read
 * it, and reuse it for the next step after completion). Results are read in place as always
 * (ard_result.data, until ard_release): with both, an allreduce copies nothing in the client.
 * Stores the buffer in *data and returns 0, or ARD_RESOURCE_EXHAUSTED at the arena cap
 * (arena_max_bytes; buffers count against it), ARD_INVALID_ARGUMENT for 0 or too many bytes.
 * The buffer is valid until ard_free or ard_client_destroy. Thread-safe. */
ARD_API int ard_alloc(ard_client* client, uint64_t bytes, void** data, char* err, size_t err_len);

/* Gives back a buffer from ard_alloc (once the submits reading it have completed; the caller may
 * free it earlier, the arena takes it back after them). ARD_INVALID_ARGUMENT when `data` is not
 * a live ard_alloc buffer. Thread-safe. */
ARD_API int ard_free(ard_client* client, void* data, char* err, size_t err_len);

/* GPU path (issue 6): a collective on a CUDA device tensor: allreduce (with prescale/postscale),
 * broadcast, allgather or reducescatter. `request` as for ard_submit, with request->data a device
 * pointer on CUDA device `device` (the input), `device_out` the device pointer the result is
 * written to and `stream` the framework's CUstream (NULL: the legacy default stream).
 * device_out must hold the whole result, whose shape comes back in result->shape:
 *   allreduce, broadcast  the input's size (device_out may equal data);
 *   reducescatter         this rank's block of the first dimension (as for host tensors: the first
 *                         shape[0] % size ranks get one row more), at most the input's size;
 *   allgather             size x the input (every rank's first dimension must be equal for
 *                         device tensors; unequal ones fail that tensor on every rank with
 *                         ARD_INVALID_ARGUMENT — use ard_submit for uneven allgather).
 * The staging range each submit takes is that large (allgather: size x input bytes) and comes out
 * of the staging arena of $ALLREDUCED_GPU_ARENA_BYTES (default 64 MiB), with one of
 * $ALLREDUCED_GPU_EVENTS (default 64) pool events per submit in flight; ARD_RESOURCE_EXHAUSTED
 * when either is used up (retry after completions). The first call registers this process's
 * staging arena and event pool with the daemon (GPU_REGISTER) and blocks until every local rank of
 * the job registered (up to the client timeout). Then, without waiting for the GPU: the input is
 * copied into the staging arena on `stream` and submitted; on completion the copy to device_out is
 * enqueued on `stream` (after the daemon's result) before `done` runs, so work issued on `stream`
 * afterwards sees the result. result->data is NULL and bytes 0. Use one stream for all of a
 * process's device submits (staging ranges are reused in completion order).
 * ARD_FAILED_PRECONDITION "no CUDA driver/device" without a GPU; otherwise as ard_submit. */
ARD_API int ard_submit_device(ard_client* client, const ard_request* request, int device,
                              void* device_out, void* stream, ard_done_fn done, void* user,
                              uint64_t* handle, char* err, size_t err_len);

/* Waits up to timeout_ms (negative: forever; 0: poll) for a handle submitted without a callback,
 * fills `out` and returns its code. ARD_PENDING (-1) when the timeout expired with the request
 * still pending (wait again later); ARD_INVALID_ARGUMENT for an unknown or released handle or one
 * that has a callback. Waiting again on a completed, unreleased handle returns the same result.
 * Thread-safe; several threads may wait on the same handle. */
ARD_API int ard_wait(ard_client* client, uint64_t handle, int timeout_ms, ard_result* out);

/* The caller is done with a completed handle: its result pointers become invalid and the daemon
 * may reuse the result slot (a RELEASE frame is sent when the result had bytes > 0). Required once
 * after every completion, including those delivered through a callback. Unknown, released or
 * still-pending handles are ignored. Thread-safe. */
ARD_API void ard_release(ard_client* client, uint64_t handle);

/* Says goodbye to the daemon, closes the socket, joins the receiver thread, completes requests
 * still pending with ARD_CANCELLED (their callbacks run on this thread) and unmaps all shared
 * memory. After device submits it first waits (up to the client timeout) for the daemon to confirm
 * that it no longer uses the GPU staging arena and events, and frees them only then; without that
 * answer they stay allocated until the process exits. No other call on `client` may be in progress
 * or follow. NULL is ignored. */
ARD_API void ard_client_destroy(ard_client* client);

/* "OK", "CANCELLED", ..., "UNAVAILABLE" (absl's names); "UNKNOWN" for other values. The string
 * is static. */
ARD_API const char* ard_code_name(int code);

/* Every ARD_* enumerator of this header by name ("ARD_SUM" and its value, ...): points *names and
 * *values at parallel arrays of static storage and returns their length. For callers that cannot
 * compile this header (the PyTorch package reads them through ctypes instead of keeping its own
 * copy of the numbers). Any thread. */
ARD_API int ard_constants(const char* const** names, const int** values);

/* GPU path (issue 6): whether this process can use CUDA device `device` for the GPU path. Loads
 * the CUDA driver at run time (dlopen "libcuda.so.1"; the library never links CUDA), allocates a
 * small staging arena and one interprocess event and exports their IPC handles, then frees them.
 * ARD_OK, or ARD_FAILED_PRECONDITION with "no CUDA driver/device: ..." in err when there is no
 * driver or GPU (another code when a CUDA call fails). Any thread. */
ARD_API int ard_gpu_probe(int device, char* err, size_t err_len);

#ifdef __cplusplus
}  /* extern "C" */
#endif
