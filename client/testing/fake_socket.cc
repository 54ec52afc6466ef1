#include "client/testing/fake_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

namespace ard::client::testing {

FakeConn::~FakeConn() {
  for (Outgoing& o : out) {
    if (o.fd >= 0) ::close(o.fd);
  }
  for (Mapped& m : inputs) ::munmap(m.base, m.bytes);
  ::close(fd);
}

void FakeConn::Send(std::string frame, int pass_fd) {
  out.push_back({std::move(frame), pass_fd});
  Flush();
}

void FakeConn::Flush() {
  while (!out.empty()) {
    Outgoing& o = out.front();
    iovec iov = {o.bytes.data(), o.bytes.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (o.fd >= 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* cm = CMSG_FIRSTHDR(&msg);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(cm), &o.fd, sizeof(int));
    }
    if (::sendmsg(fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) return;  // EAGAIN: on POLLOUT
    if (o.fd >= 0) ::close(o.fd);
    out.pop_front();
  }
}

int FakeConn::Receive(std::vector<char>* buf, size_t* bytes, int* received_fd, bool* truncated) {
  iovec iov = {buf->data(), buf->size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return (errno == EAGAIN || errno == EINTR) ? 0 : -1;
  if (n == 0) return -1;
  *received_fd = -1;
  cmsghdr* cm = CMSG_FIRSTHDR(&msg);
  if (cm != nullptr && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
    std::memcpy(received_fd, CMSG_DATA(cm), sizeof(int));
  }
  *truncated = (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  *bytes = static_cast<size_t>(n);
  return 1;
}

std::string EncodeFrame(wire::MsgType type, uint64_t request_id, const void* payload,
                        size_t payload_bytes, const std::string& tail) {
  wire::FrameHeader h = {wire::kMagic, wire::kVersion, static_cast<uint16_t>(type),
                         static_cast<uint32_t>(payload_bytes + tail.size()), 0, request_id};
  std::string s(reinterpret_cast<const char*>(&h), sizeof(h));
  s.append(static_cast<const char*>(payload), payload_bytes);
  return s + tail;
}

std::string EncodeErrorFrame(wire::MsgType type, uint64_t request_id, int32_t code,
                             const std::string& message) {
  wire::Error e = {code, static_cast<uint32_t>(message.size())};
  return EncodeFrame(type, request_id, &e, sizeof(e), message);
}

void CheckSys(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("fake daemon: ") + what + ": " + strerror(errno));
}

int ReopenReadOnly(int fd) {
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  int ro = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CheckSys(ro >= 0, "reopen O_RDONLY");
  return ro;
}

bool MapClientSegment(int fd, uint64_t bytes, Mapped* out, std::vector<std::string>* violations) {
  if (fd < 0) return false;
  int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) violations->push_back("segment not F_SEAL_SHRINK");
  if (seals >= 0 && (seals & F_SEAL_SEAL)) violations->push_back("segment sealed F_SEAL_SEAL");
  char link[256] = {};
  std::string proc = "/proc/self/fd/" + std::to_string(fd);
  (void)!::readlink(proc.c_str(), link, sizeof(link) - 1);
  if (std::strncmp(link, "/memfd:ard-input", 16) != 0) {
    violations->push_back(std::string("segment is not an ard-input memfd: ") + link);
  }
  struct stat st;
  if (bytes == 0 || ::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes) {
    violations->push_back("segment smaller than announced");
    return false;
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return false;
  *out = {static_cast<char*>(base), bytes};
  return true;
}

}  // namespace ard::client::testing
