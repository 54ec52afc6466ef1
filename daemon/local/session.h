// One connected local client process (a training process) as the daemon sees it.
//
// Threads: created, registered and closed on the control loop; Send/EndRequest/Release are also
// called by the job's executor thread, hence the mutex. Frames are sent in call order: when the
// socket buffer is full they queue in an outbox that the loop flushes on EPOLLOUT; a client whose
// outbox exceeds its bound is not reading and is disconnected.
//
// Lifecycle: 1. accepted (unregistered); 2. HELLO maps its first arena segment and attaches it to a
// job (registration fields set on the loop); 3. requests begin at SUBMIT (name in flight) and end
// when COMPLETE is sent; a result stays referenced until RELEASE; 4. Close() on hang-up/BYE: later
// sends are dropped, held results are freed; the object may live on in executor queues until
// they drain (shared_ptr).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/shm/input_arena.h"
#include "daemon/shm/result_arena.h"

namespace ard::local {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

class Session {
 public:
  // `want_writable` is called (from any thread) when frames are queued and the loop should watch
  // the socket for EPOLLOUT, and when the session is cut off (its outbox would exceed
  // `max_outbox_bytes`) so the loop closes it.
  Session(int fd, PeerCredentials creds, uint64_t max_input_bytes,
          std::function<void()> want_writable, size_t max_outbox_bytes = 64 << 20);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  int fd() const { return fd_; }
  const PeerCredentials& creds() const { return creds_; }

  // Sends a frame, passing `pass_fd` (not owned; the kernel duplicates it) when >= 0. Returns
  // false when the session is closed or has been cut off for not reading.
  bool Send(const std::string& frame, int pass_fd = -1);
  // Loop: retries queued frames; returns true when the outbox is empty again.
  bool FlushOutbox();
  // Loop: the connection is gone; drop queued frames and held results.
  void Close();
  bool closed() const;
  bool cut_off() const;
  // Why it was cut off: the peer is gone (a send failed: it exited) rather than not reading.
  bool peer_gone() const;

  // A SUBMIT's name becomes in flight. False (with no change) when it already is.
  bool BeginRequest(uint64_t request_id, const std::string& name);
  // Its COMPLETE is about to be sent: the name is free again; `slot` (may be null) is held until
  // Release(request_id).
  void EndRequest(uint64_t request_id, std::shared_ptr<shm::ResultSlot> slot);
  // Refuses one of this client's requests: an ERROR frame with `status` (not OK), and a warning
  // naming the process, its job and rank. Loop thread.
  void Reject(uint64_t request_id, const absl::Status& status);

  // RELEASE from the client. False when nothing is held under that id.
  bool Release(uint64_t request_id);
  size_t held_results() const;

  // Registration, loop thread only.
  shm::InputArena input;
  std::string job;  // empty until HELLO
  uint32_t job_id = 0;  // the daemon's id of that job (an elastic job's generations share a name)
  int rank = -1;
  int local_rank = -1;
  bool welcomed = false;
  absl::Time last_activity;

 private:
  struct Queued {
    std::string frame;
    int fd;  // dup()ed, owned; -1 for none
  };

  const int fd_;
  const PeerCredentials creds_;
  const std::function<void()> want_writable_;
  const size_t max_outbox_bytes_;
  mutable absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool cut_off_ ABSL_GUARDED_BY(mu_) = false;
  bool peer_gone_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Queued> outbox_ ABSL_GUARDED_BY(mu_);
  size_t outbox_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::string> in_flight_ ABSL_GUARDED_BY(mu_);  // request id -> name
  std::set<std::string> in_flight_names_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, std::shared_ptr<shm::ResultSlot>> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ard::local
