// A connected client of the local daemon: the object behind the C API's ard_client. It is the
// composition root of the client library: it owns the connection, the input arena, the result
// segments, the request table and the receiver thread.
//
// Lifecycle:
//   1. Create(): connect, make input segment 0, send HELLO (+ its memfd), wait up to
//      config.timeout_ms for WELCOME (+ result segment 0) or ERROR, start the receiver thread.
//   2. Submit()/Wait()/Release() from any thread. Frames (RESULT_SEGMENT, COMPLETE, ERROR, NOTIFY,
//      the socket closing) are read and handled by one thread at a time, whichever holds the read
//      role (read_mu_): a thread in Wait() whose request is pending reads them itself, so its
//      answer wakes it directly rather than the receiver thread, which would then have to wake it
//      (one hand-off less per request); the receiver thread reads all the time once a request
//      with a callback (or the GPU path) was used, else only what arrives while nobody waits
//      (every kParkMs). Callbacks run on the thread that read their COMPLETE.
//   3. ~Session(): GPU_UNREGISTER and its answer when a GPU was registered, BYE, shut the socket
//      down, join the receiver, cancel what is pending (callbacks run on the destroying thread),
//      unmap everything; the GPU staging is freed only if the daemon answered GPU_UNREGISTERED.
// Thread-safe; a terminal failure (NOTIFY, lost connection, protocol error) fails every pending
// request and every later Submit() with the same status.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/allreduced_client.h"
#include "client/arena.h"
#include "client/config.h"
#include "client/connection.h"
#include "client/gpu_staging.h"
#include "client/request_table.h"
#include "client/result_segments.h"
#include "client/shared_buffers.h"
#include "client/status.h"

namespace ard::client {

class Session {
 public:
  static Status Create(const ClientConfig& config, std::unique_ptr<Session>* out);
  ~Session();

  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const ard_topology& topology() const { return topology_; }
  const std::string& job() const { return config_.job; }
  bool hosts_updated() const { return hosts_updated_; }

  // ard_submit / ard_wait / ard_release semantics (allreduced_client.h).
  Status Submit(const ard_request& request, ard_done_fn done, void* user, uint64_t* handle);
  // ard_submit_device (GPU path).
  Status SubmitDevice(const ard_request& request, int device, void* device_out, void* stream,
                      ard_done_fn done, void* user, uint64_t* handle);
  int Wait(uint64_t handle, int timeout_ms, ard_result* out);
  void Release(uint64_t handle);
  // ard_alloc / ard_free (shared_buffers.h).
  Status Allocate(uint64_t bytes, void** data) { return shared_->Allocate(bytes, data); }
  Status Free(void* data) { return shared_->Free(data); }

  // For tests.
  const InputArena& arena() const { return *arena_; }
  // Input bytes Submit() copied into the arena (not counting inputs built in ard_alloc buffers).
  uint64_t copied_input_bytes() const { return copied_input_bytes_; }
  // Frames read by the receiver thread (the rest were read by threads in Wait()).
  uint64_t receiver_frames() const { return receiver_frames_; }
  // Waits whose answer arrived while the thread spun ($ALLREDUCED_WAIT_SPIN_US).
  uint64_t spin_answers() const { return spin_answers_; }
  size_t record_count() const { return requests_.record_count(); }

 private:
  explicit Session(const ClientConfig& config);

  Status Start();
  Status SendHello();
  Status AwaitWelcome();
  Status AcceptWelcome(Frame& frame);
  Status PublishSegment(uint32_t index, int fd, uint64_t bytes);

  // Reading (session_read.cc).
  void ReceiveLoop();  // receiver thread
  // Requires read_mu_. Reads and handles one frame, waiting up to timeout_ms (< 0: forever).
  // False on timeout, or when the connection has ended (every request then failed).
  bool ReadFrame(int timeout_ms);
  // Requires read_mu_. The bounded adaptive spin: polls the socket for up to wait_spin_us, while
  // `handle` is pending and recent spins caught their answers. True when it was answered.
  bool Spin(uint64_t handle, ard_result* out);
  void UseReceiver();                // from now on the receiver thread reads all the time
  void WakeReceiver();               // it re-checks closing_ and receiver_reads_
  Status HandleFrame(Frame& frame);  // read role; an error is a protocol failure
  Status HandleComplete(const Frame& frame);
  Status HandleError(const Frame& frame, bool notify);
  void SendRelease(uint64_t handle);
  void FreeInput(uint64_t handle);                // the daemon is done reading the request's input
  void ReturnSlot(const InputArena::Slot& slot);  // to the arena, or ends a shared buffer's use
  void FailAll(const Status& status);             // terminal
  void Deliver(std::vector<Finished> finished);   // frees input slots, runs callbacks

  // GPU path (session_gpu.cc).
  struct GpuPending {
    uint64_t offset = 0, bytes = 0, reserved = 0;  // staging range [offset, offset + reserved)
    uint64_t capacity = 0;  // result bytes that fit (allgather: size x input bytes)
    uint64_t elem = 1;      // dtype size: the result's bytes follow from COMPLETE's shape
    uint32_t event = 0;
    bool skip_copy_out = false;  // a broadcast root in place: the output already holds the result
    void* out = nullptr;
    void* stream = nullptr;
  };
  Status RegisterGpu(int device);                           // once per process, under gpu_mu_
  Status AllocateGpu(uint64_t bytes, GpuPending* pending);  // under gpu_mu_
  // COMPLETE/ERROR of a device submit: enqueues the copy-out of the result (its size from
  // `complete`'s shape; NULL for an ERROR) when `status` is OK and frees its staging range and
  // event. Returns the status to report. False: `id` is not a device submit.
  bool FinishGpu(uint64_t id, Status* status, const wire::Complete* complete);
  // GPU_REGISTER's or GPU_UNREGISTER's answer. False: `frame` answers neither.
  bool HandleGpuReply(const Frame& frame, const Status& status);
  // ~Session, before BYE: GPU_UNREGISTER, then waits for GPU_UNREGISTERED, the connection's end or
  // the timeout. True when the staging may be freed (the daemon said so, or none was registered).
  bool UnregisterGpu();
  void ReceiverExited();  // wakes a GPU_REGISTER/GPU_UNREGISTER wait

  const ClientConfig config_;
  std::unique_ptr<Connection> connection_;
  std::unique_ptr<InputArena> arena_;
  std::unique_ptr<SharedBuffers> shared_;  // over arena_
  std::atomic<uint64_t> copied_input_bytes_{0};
  ResultSegments results_;  // creating thread until Start() returns, then the read role
  RequestTable requests_;
  ard_topology topology_{};
  uint64_t max_tensor_bytes_ = wire::kMaxTensorBytes;
  std::atomic<uint64_t> next_handle_{1};  // 0 means "no request" on the wire
  std::atomic<bool> closing_{false};
  std::atomic<bool> hosts_updated_{false};  // an elastic job's daemon said others wait to join
  std::thread receiver_;
  std::mutex read_mu_;                  // the read role: Connection::Receive and frame handling
  std::atomic<bool> read_done_{false};  // the connection ended (set with the read role)
  std::atomic<bool> receiver_reads_{false};  // callbacks or the GPU path in use
  std::atomic<uint64_t> receiver_frames_{0};
  std::atomic<int> spin_skips_{0};  // waits left that sleep at once (the last spin did not pay)
  std::atomic<uint64_t> spin_answers_{0};  // answers a spin caught (for tests)
  std::mutex park_mu_;                     // with park_cv_: the receiver thread's nap
  std::condition_variable park_cv_;

  std::mutex gpu_mu_;
  std::condition_variable gpu_cv_;
  std::unique_ptr<GpuStaging> gpu_;  // after a successful registration
  uint64_t gpu_register_id_ = 0;     // in flight
  uint64_t gpu_unregister_id_ = 0;   // in flight
  bool gpu_answered_ = false;
  bool receiver_exited_ = false;  // nothing more will be answered
  Status gpu_register_status_;
  std::map<uint64_t, uint64_t> gpu_free_;  // staging offset -> bytes (free ranges)
  std::vector<uint32_t> gpu_free_events_;
  std::map<uint64_t, GpuPending> gpu_pending_;  // by request id
};

}  // namespace ard::client
