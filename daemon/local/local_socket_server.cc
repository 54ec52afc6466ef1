#include "daemon/local/local_socket_server.h"

#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/common/logging.h"

namespace ard::local {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat(what, ": ", std::strerror(errno)));
}

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

bool FillAddress(const std::string& path, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr->sun_path)) return false;
  std::memcpy(addr->sun_path, path.c_str(), path.size());
  return true;
}

// mkdir -p with mode 0755 for directories it creates.
absl::Status MakeDirs(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
    }
    return absl::OkStatus();
  }
  if (dir != "/" && dir != ".") {
    absl::Status parent = MakeDirs(Dirname(dir));
    if (!parent.ok()) return parent;
  }
  if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Errno(absl::StrCat("cannot create directory ", dir));
  }
  return absl::OkStatus();
}

}  // namespace

LocalSocketServer::LocalSocketServer(std::string path, std::string group)
    : path_(std::move(path)), group_(std::move(group)) {}

LocalSocketServer::~LocalSocketServer() { Stop(); }

absl::Status LocalSocketServer::PrepareParentDirectory() const {
  absl::Status s = MakeDirs(Dirname(path_));
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("local socket ", path_, ": ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status LocalSocketServer::CheckExistingPath() const {
  struct stat st;
  if (lstat(path_.c_str(), &st) != 0) return absl::OkStatus();  // nothing there
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "local socket ", path_, " exists and is not a socket; refusing to replace it"));
  }
  // A socket file: is a daemon still serving on it?
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  sockaddr_un addr;
  FillAddress(path_, &addr);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  if (live) {
    return absl::FailedPreconditionError(absl::StrCat(
        "local socket ", path_, " is in use by another running daemon"));
  }
  return absl::OkStatus();  // stale: Start() renames over it
}

absl::Status LocalSocketServer::Start() {
  if (auto s = PrepareParentDirectory(); !s.ok()) return s;
  if (auto s = CheckExistingPath(); !s.ok()) return s;
  gid_t gid = static_cast<gid_t>(-1);
  if (!group_.empty()) {
    group* g = getgrnam(group_.c_str());
    if (g == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat("socket_group '", group_, "' not found"));
    }
    gid = g->gr_gid;
  }
  const std::string temp = absl::StrCat(path_, ".tmp.", getpid());
  sockaddr_un addr;
  if (!FillAddress(temp, &addr)) {
    return absl::InvalidArgumentError(absl::StrCat("local socket path too long: ", path_));
  }
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return Errno("socket(AF_UNIX)");
  unlink(temp.c_str());
  auto fail = [&](const std::string& what) {
    absl::Status s = Errno(absl::StrCat("local socket ", path_, ": ", what));
    unlink(temp.c_str());
    close(listen_fd_);
    listen_fd_ = -1;
    return s;
  };
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return fail("bind");
  if (chmod(temp.c_str(), 0660) != 0) return fail("chmod 0660");
  if (gid != static_cast<gid_t>(-1) && chown(temp.c_str(), -1, gid) != 0) return fail("chown");
  if (listen(listen_fd_, SOMAXCONN) != 0) return fail("listen");
  if (rename(temp.c_str(), path_.c_str()) != 0) return fail("rename into place");
  struct stat st;
  if (stat(path_.c_str(), &st) == 0) socket_inode_ = st.st_ino;

  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (wake_fd_ < 0 || epoll_fd_ < 0) return Errno("eventfd/epoll_create1");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = listen_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void LocalSocketServer::Run() {
  pthread_setname_np(pthread_self(), "ard-local");
  epoll_event events[64];
  for (;;) {
    int n = epoll_wait(epoll_fd_, events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      Logger("local")->error("epoll_wait failed error=\"{}\"", std::strerror(errno));
      return;
    }
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) return;
      if (fd == listen_fd_) {
        Accept();
        continue;
      }
      // Until the wire protocol exists, any frame is read and discarded; hang-up closes.
      char buf[4096];
      ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR) ||
          (events[i].events & (EPOLLHUP | EPOLLERR))) {
        CloseConnection(fd);
      }
    }
  }
}

void LocalSocketServer::Accept() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        Logger("local")->warn("accept failed error=\"{}\"", std::strerror(errno));
      }
      return;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    absl::MutexLock lock(&mu_);
    connections_[fd] = PeerCredentials{cred.pid, cred.uid, cred.gid};
    Logger("local")->debug("client connected pid={} uid={} gid={}", cred.pid, cred.uid, cred.gid);
  }
}

void LocalSocketServer::CloseConnection(int fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  close(fd);
  absl::MutexLock lock(&mu_);
  auto it = connections_.find(fd);
  if (it != connections_.end()) {
    Logger("local")->debug("client disconnected pid={}", it->second.pid);
    connections_.erase(it);
  }
}

int LocalSocketServer::connection_count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(connections_.size());
}

void LocalSocketServer::Stop() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  {
    absl::MutexLock lock(&mu_);
    for (auto& [fd, cred] : connections_) close(fd);
    connections_.clear();
  }
  if (listen_fd_ >= 0) {
    // Unlink only if the path is still our socket (another daemon may have replaced it).
    struct stat on_disk;
    if (stat(path_.c_str(), &on_disk) == 0 && on_disk.st_ino == socket_inode_) {
      unlink(path_.c_str());
    }
    close(listen_fd_);
    listen_fd_ = -1;
  }
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  epoll_fd_ = wake_fd_ = -1;
}

}  // namespace ard::local
