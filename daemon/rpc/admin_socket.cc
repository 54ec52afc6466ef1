#include "daemon/rpc/admin_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "daemon/common/logging.h"
#include "grpcpp/server_posix.h"

namespace ard::rpc {

absl::Status AdminSocket::Start(const std::string& path, grpc::Server* server) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("admin socket path too long: ", path));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("admin socket: ", std::strerror(errno)));
  unlink(path.c_str());  // a stale file from a daemon that did not shut down
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 16) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot listen on admin socket ", path, ": ", std::strerror(e)));
  }
  // Every local user may connect; each call is authorized by the caller's uid.
  chmod(path.c_str(), 0666);
  if (pipe2(stop_pipe_, O_CLOEXEC) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("admin socket: pipe: ", std::strerror(errno)));
  }
  path_ = path;
  listen_fd_ = fd;
  server_ = server;
  thread_ = std::thread([this] { AcceptLoop(); });
  return absl::OkStatus();
}

void AdminSocket::Stop() {
  if (!thread_.joinable()) return;
  const char byte = 0;
  (void)!write(stop_pipe_[1], &byte, 1);
  thread_.join();
  close(listen_fd_);
  close(stop_pipe_[0]);
  close(stop_pipe_[1]);
  listen_fd_ = stop_pipe_[0] = stop_pipe_[1] = -1;
  unlink(path_.c_str());
}

void AdminSocket::AcceptLoop() {
  pthread_setname_np(pthread_self(), "ard-admin");
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      Logger("rpc")->error("admin socket poll failed: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    const int conn = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (conn < 0) continue;
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      close(conn);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      uid_by_fd_[conn] = cred.uid;
    }
    grpc::AddInsecureChannelFromFd(server_, conn);  // gRPC owns (and closes) the fd now
  }
}

std::optional<uid_t> AdminSocket::PeerUid(const std::string& peer) const {
  int fd;
  absl::string_view rest = peer;
  if (!absl::ConsumePrefix(&rest, "fd:") || !absl::SimpleAtoi(rest, &fd)) return std::nullopt;
  absl::MutexLock lock(&mu_);
  auto it = uid_by_fd_.find(fd);
  if (it == uid_by_fd_.end()) return std::nullopt;
  return it->second;
}

}  // namespace ard::rpc
