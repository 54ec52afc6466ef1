// Socket-level helpers for the fake daemon (test-only): frame encoding, a non-blocking
// connection with an outgoing queue (as the real daemon's epoll server must have, so a client
// blocked sending never deadlocks against a daemon blocked sending), and checks on the memfds a
// client passes. Not synchronised: the fake daemon calls these under its own lock.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "proto/local_wire.h"

namespace ard::client::testing {

struct Mapped {
  char* base = nullptr;
  uint64_t bytes = 0;
};

// One accepted client connection.
struct FakeConn {
  struct Outgoing {
    std::string bytes;
    int fd = -1;  // owned; closed once sent
  };
  explicit FakeConn(int socket_fd) : fd(socket_fd) {}
  ~FakeConn();  // closes the socket and queued fds, unmaps the client's segments
  FakeConn(const FakeConn&) = delete;
  FakeConn& operator=(const FakeConn&) = delete;

  // Queues a frame (with `pass_fd` as SCM_RIGHTS when >= 0, ownership taken) and sends what the
  // socket accepts now; the rest waits for POLLOUT and Flush().
  void Send(std::string frame, int pass_fd = -1);
  void Flush();

  // Reads the next message without blocking: 1 and the message, 0 when nothing is queued, -1
  // when the peer closed. *received_fd is -1 or a descriptor the caller must close.
  int Receive(std::vector<char>* buf, size_t* bytes, int* received_fd, bool* truncated);

  const int fd;
  std::vector<Mapped> inputs;  // the client's input segments, mapped read-only
  std::deque<Outgoing> out;
};

std::string EncodeFrame(wire::MsgType type, uint64_t request_id, const void* payload,
                        size_t payload_bytes, const std::string& tail = "");
std::string EncodeErrorFrame(wire::MsgType type, uint64_t request_id, int32_t code,
                             const std::string& message);

// A read-only descriptor for the same file (open("/proc/self/fd/N", O_RDONLY)).
int ReopenReadOnly(int fd);

// Checks that `fd` is an "ard-input" memfd sealed F_SEAL_SHRINK (and not F_SEAL_SEAL) of at
// least `bytes`, appending what is wrong to `violations`; maps it read-only when big enough.
bool MapClientSegment(int fd, uint64_t bytes, Mapped* out, std::vector<std::string>* violations);

// Throws std::runtime_error with errno's text when !ok (fixture set-up only).
void CheckSys(bool ok, const char* what);

}  // namespace ard::client::testing
