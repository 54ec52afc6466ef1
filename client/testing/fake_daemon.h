// A fake allreduced for the client library's tests: a real SOCK_SEQPACKET Unix socket under /tmp
// served by one thread that speaks proto/local_wire.h like the daemon's local server, but with
// no job logic. It checks what a real daemon relies on (HELLO/ADD_SEGMENT fds are sealed memfds,
// dense segment indexes, SUBMITs name announced segments with aligned, in-bounds offsets, RELEASEs
// name outstanding results) and records violations instead of crashing.
//
// Answers: WELCOME with result segment 0 (a read-only fd obtained by reopening
// /proc/self/fd/N O_RDONLY); for each SUBMIT a COMPLETE whose result is input * 2 for float32
// allreduce and a copy of the input otherwise (0 bytes for barrier/join). A released result slot
// is overwritten with 0xAB before reuse, so a client reading after RELEASE would see garbage.
// In hold mode SUBMITs wait for CompleteHeld(). Tests may inject ERROR, NOTIFY, RESULT_SEGMENT,
// failed COMPLETEs, or close every connection.
//
// Threads: the serving thread owns the sockets; every public method may be called from any
// thread. Sockets are non-blocking with a queue per connection, as the daemon's must be.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "proto/local_wire.h"

namespace ard::client::testing {

struct FakeDaemonOptions {
  enum class HelloReply { kWelcome, kError, kSilent };
  HelloReply hello_reply = HelloReply::kWelcome;
  int32_t hello_error_code = static_cast<int32_t>(wire::Code::kFailedPrecondition);
  std::string hello_error_message = "job refused by the fake daemon";
  // rank, size, local_rank, local_size, cross_rank, cross_size, (bytes: set from below),
  // max_tensor_bytes (0: the wire limit), job_id.
  wire::Welcome welcome = {0, 1, 0, 1, 0, 1, 0, 0, 7, 0};
  uint64_t result_segment_bytes = 64ull << 20;
  bool hold_submits = false;
  // GPU path: GPU_REGISTER is answered GPU_REGISTERED; GPU_UNREGISTER is answered at once unless
  // this is false (then AnswerGpuUnregister). A GPU_SUBMIT is answered as a SUBMIT, in place in the
  // staging arena, which must come from the client's host double of the CUDA driver
  // (client/testing/fake_cuda.cc: its IPC handle holds the arena's address in this process). A
  // broadcast from another rank's root arrives as bytes 0x42.
  bool answer_gpu_unregister = true;
};

struct ReceivedSubmit {
  uint64_t request_id = 0;
  wire::Submit submit{};
  std::vector<int64_t> splits;
};

// What the fake observed; read under its lock through WaitFor() or copied by State().
struct FakeDaemonState {
  int connections = 0;
  int disconnects = 0;
  int hellos = 0;
  int byes = 0;
  wire::Hello hello{};           // the last HELLO
  std::vector<uint16_t> frames;  // every frame type received, in order
  std::vector<ReceivedSubmit> submits;
  std::vector<uint64_t> held;  // SUBMITs not answered yet (hold mode)
  std::vector<uint64_t> releases;
  int gpu_registers = 0;
  std::vector<uint64_t> gpu_unregisters;  // request ids, in order
  std::vector<ReceivedSubmit> gpu_submits;
  std::vector<wire::Segment> added_segments;
  size_t outstanding_results = 0;  // COMPLETEs with bytes > 0 not yet RELEASEd
  std::vector<std::string> violations;
};

class FakeDaemon {
 public:
  explicit FakeDaemon(FakeDaemonOptions options = FakeDaemonOptions());
  ~FakeDaemon();  // closes every socket, joins the thread, removes the socket file
  FakeDaemon(const FakeDaemon&) = delete;
  FakeDaemon& operator=(const FakeDaemon&) = delete;

  const std::string& socket_path() const;

  // Waits until `pred` holds (evaluated under the lock at every change); false on timeout.
  bool WaitFor(const std::function<bool(const FakeDaemonState&)>& pred, int timeout_ms = 10000);
  FakeDaemonState State();

  // Commands; frames go out after anything already queued, to every connection when no
  // request id selects one.
  void SetHold(bool hold);
  bool CompleteHeld(uint64_t request_id);  // false when that request is not held
  void CompleteAllHeld();
  void SendFailedComplete(uint64_t request_id, int32_t code, const std::string& message);
  void SendError(uint64_t request_id, int32_t code, const std::string& message);
  void SendNotify(int32_t code, const std::string& message);
  void AddResultSegment(uint64_t bytes);  // results are then placed in the newest segment first
  void CloseConnections();
  void AnswerGpuUnregister();  // every GPU_UNREGISTER not answered yet

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ard::client::testing
