#include "client/connection.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <utility>

namespace ard::client {
namespace {

constexpr size_t kHeaderBytes = sizeof(wire::FrameHeader);

int PollTimeout(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

// Waits for the socket to become readable. OK when readable (or hung up: recvmsg reports it).
Status WaitReadable(int fd, int timeout_ms) {
  if (timeout_ms < 0) return OkStatus();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    struct pollfd p = {fd, POLLIN, 0};
    int n = ::poll(&p, 1, PollTimeout(deadline));
    if (n > 0) return OkStatus();
    if (n == 0) return {wire::Code::kDeadlineExceeded, "timed out"};
    if (errno != EINTR) return Internal(ErrnoMessage("poll", errno));
  }
}

}  // namespace

Connection::Connection(UniqueFd fd, std::string path)
    : fd_(std::move(fd)), path_(std::move(path)), recv_buf_(wire::kMaxFrameBytes + 1) {}

Status Connection::Connect(const std::string& path, std::unique_ptr<Connection>* out) {
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument("socket path '" + path + "' is empty or too long");
  }
  memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Internal(ErrnoMessage("socket(AF_UNIX, SOCK_SEQPACKET)", errno));
  int rc;
  do {
    rc = ::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    int err = errno;
    std::string message =
        ErrnoMessage("cannot connect to allreduced daemon at " + path, err) +
        " (is allreduced running, and ALLREDUCED_SOCKET right?)";
    if (err == EACCES || err == EPERM) return {wire::Code::kPermissionDenied, message};
    return Unavailable(message);
  }
  out->reset(new Connection(std::move(fd), path));
  return OkStatus();
}

std::string Connection::LostMessage() const {
  return "lost connection to allreduced daemon at " + path_;
}

Status Connection::Send(wire::MsgType type, uint64_t request_id, const void* payload,
                        size_t payload_bytes, const void* tail, size_t tail_bytes, int fd) {
  wire::FrameHeader header = {wire::kMagic, wire::kVersion, static_cast<uint16_t>(type),
                              static_cast<uint32_t>(payload_bytes + tail_bytes), 0, request_id};
  struct iovec iov[3] = {{&header, kHeaderBytes},
                         {const_cast<void*>(payload), payload_bytes},
                         {const_cast<void*>(tail), tail_bytes}};
  struct msghdr msg = {};
  msg.msg_iov = iov;
  msg.msg_iovlen = 3;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cmsg), &fd, sizeof(int));
  }
  std::lock_guard<std::mutex> lock(send_mu_);
  while (true) {
    if (::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL) >= 0) return OkStatus();
    if (errno == EINTR) continue;
    int err = errno;
    if (err == EMSGSIZE) return Internal(ErrnoMessage("sendmsg of a local frame", err));
    return Unavailable(ErrnoMessage(LostMessage(), err));
  }
}

Status Connection::ReceiveMessage(size_t* bytes, UniqueFd* fd) {
  struct iovec iov = {recv_buf_.data(), recv_buf_.size()};
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(fd_.get(), &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return Unavailable(ErrnoMessage(LostMessage(), errno));
  if (n == 0) return Unavailable(LostMessage());
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received;
      memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (fd->valid()) ::close(received);  // only one descriptor per frame is meaningful
      else fd->Reset(received);
    }
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    return Internal("frame from the daemon larger than " + std::to_string(wire::kMaxFrameBytes) +
                    " bytes or with more than one descriptor");
  }
  *bytes = static_cast<size_t>(n);
  return OkStatus();
}

Status Connection::Receive(int timeout_ms, Frame* frame) {
  ARD_CLIENT_RETURN_IF_ERROR(WaitReadable(fd_.get(), timeout_ms));
  size_t bytes = 0;
  UniqueFd fd;
  ARD_CLIENT_RETURN_IF_ERROR(ReceiveMessage(&bytes, &fd));
  if (bytes < kHeaderBytes) {
    return Internal("frame from the daemon of " + std::to_string(bytes) + " bytes has no header");
  }
  wire::FrameHeader header;
  memcpy(&header, recv_buf_.data(), kHeaderBytes);
  if (header.magic != wire::kMagic) return Internal("frame from the daemon has a bad magic");
  if (header.version != wire::kVersion) {
    return Internal("daemon speaks local wire version " + std::to_string(header.version) +
                    ", this client " + std::to_string(wire::kVersion));
  }
  if (header.payload_bytes != bytes - kHeaderBytes) {
    return Internal("frame from the daemon: payload_bytes " +
                    std::to_string(header.payload_bytes) + " but " +
                    std::to_string(bytes - kHeaderBytes) + " bytes follow the header");
  }
  frame->header = header;
  frame->payload = recv_buf_.data() + kHeaderBytes;
  frame->payload_bytes = header.payload_bytes;
  frame->fd = std::move(fd);
  return OkStatus();
}

void Connection::Shutdown() { ::shutdown(fd_.get(), SHUT_RDWR); }

}  // namespace ard::client
