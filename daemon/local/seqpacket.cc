#include "daemon/local/seqpacket.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace ard::local {

absl::StatusOr<ReceivedMessage> RecvMessage(int socket_fd, size_t max_bytes) {
  ReceivedMessage m;
  // One buffer per thread, sized once, with a spare byte that reveals an oversized message: a
  // fresh one per call would zero max_bytes (128 KiB) for every frame and every empty read.
  thread_local std::string buffer;
  if (buffer.size() < max_bytes + 1) buffer.resize(max_bytes + 1);
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
  iovec iov{buffer.data(), max_bytes + 1};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = recvmsg(socket_fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return absl::UnavailableError("closed");
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::ResourceExhaustedError("no data");
    if (errno == ECONNRESET) return absl::UnavailableError("closed");
    return absl::InternalError(absl::StrCat("recvmsg: ", std::strerror(errno)));
  }
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    int fds[4];
    memcpy(fds, CMSG_DATA(c), count * sizeof(int));
    for (size_t i = 0; i < count; ++i) {
      if (m.fd < 0 && !m.extra_fds) {
        m.fd = fds[i];
      } else {
        close(fds[i]);
        m.extra_fds = true;
      }
    }
  }
  if (m.extra_fds && m.fd >= 0) {
    close(m.fd);
    m.fd = -1;
  }
  m.truncated = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
                static_cast<size_t>(n) > max_bytes;
  m.bytes.assign(buffer.data(), static_cast<size_t>(n) > max_bytes ? max_bytes : n);
  return m;
}

bool SendMessage(int socket_fd, const std::string& bytes, int fd) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(socket_fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(bytes.size());
}

}  // namespace ard::local
