// The client's end of the local channel: a SOCK_SEQPACKET Unix socket to the daemon carrying
// local_wire.h frames, one per message, with at most one SCM_RIGHTS descriptor each.
//
// Threads: Send() is serialised by an internal mutex and may be called from any thread (TF calls
// ard_submit from many). Receive() is used by one thread at a time: the creating thread until
// WELCOME, then the thread holding the session's read role (session_read.cc). Shutdown() may be
// called from any thread to wake a blocked Receive().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "proto/local_wire.h"
#include "client/shm.h"
#include "client/status.h"

namespace ard::client {

// One received frame. `payload` points into the connection's buffer: valid until the next
// Receive(). Header magic, version and length have been checked.
struct Frame {
  wire::FrameHeader header{};
  const char* payload = nullptr;
  size_t payload_bytes = 0;
  UniqueFd fd;  // the descriptor that came with the frame, if any
};

class Connection {
 public:
  // Connects to `path`. Unavailable when nothing listens there (PermissionDenied for EACCES).
  static Status Connect(const std::string& path, std::unique_ptr<Connection>* out);

  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends header + payload + tail as one message, with `fd` (when >= 0) as SCM_RIGHTS. Blocks
  // while the socket buffer is full. Unavailable when the daemon is gone. Thread-safe.
  Status Send(wire::MsgType type, uint64_t request_id, const void* payload, size_t payload_bytes,
              const void* tail = nullptr, size_t tail_bytes = 0, int fd = -1);

  // Waits up to timeout_ms (< 0: forever) for the next frame. DeadlineExceeded on timeout,
  // Unavailable when the socket closed (or Shutdown() was called), Internal for a malformed frame.
  Status Receive(int timeout_ms, Frame* frame);

  // Shuts the socket down both ways: a blocked Receive() returns, later sends fail.
  void Shutdown();

  const std::string& path() const { return path_; }
  std::string LostMessage() const;  // "lost connection to allreduced daemon at <path>"

 private:
  Connection(UniqueFd fd, std::string path);
  Status ReceiveMessage(size_t* bytes, UniqueFd* fd);

  const UniqueFd fd_;
  const std::string path_;
  std::mutex send_mu_;           // serialises sendmsg
  std::vector<char> recv_buf_;   // only the receiving thread touches it
};

}  // namespace ard::client
