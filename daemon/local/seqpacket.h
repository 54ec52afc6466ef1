// sendmsg/recvmsg for the local SOCK_SEQPACKET socket, with at most one SCM_RIGHTS descriptor per
// message. Non-blocking; any thread (the caller serialises use of one socket).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ard::local {

struct ReceivedMessage {
  std::string bytes;
  int fd = -1;           // received descriptor (owned by the caller), or -1
  bool extra_fds = false;  // more than one descriptor arrived (all were closed)
  bool truncated = false;  // the message or its control data was larger than allowed
};

// Returns the next message; NotFound-free contract: Unavailable("closed") at end of stream,
// ResourceExhausted when nothing is queued (EAGAIN), Internal on other errors.
absl::StatusOr<ReceivedMessage> RecvMessage(int socket_fd, size_t max_bytes);

// Sends one message (passing `fd` when >= 0). Returns false with errno set on failure
// (EAGAIN when the socket buffer is full).
bool SendMessage(int socket_fd, const std::string& bytes, int fd);

}  // namespace ard::local
