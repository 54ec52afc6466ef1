#include "daemon/local/local_socket_server.h"

#include <fcntl.h>
#include <grp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/common/duration_format.h"
#include "daemon/common/logging.h"
#include "daemon/common/make_dirs.h"
#include "daemon/local/seqpacket.h"

namespace ard::local {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::FailedPreconditionError(absl::StrCat(what, ": ", std::strerror(errno)));
}

bool FillAddress(const std::string& path, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr->sun_path)) return false;
  std::memcpy(addr->sun_path, path.c_str(), path.size());
  return true;
}

}  // namespace

LocalSocketServer::LocalSocketServer(EventLoop& loop, LocalSocketOptions options,
                                     SessionHandler& handler)
    : loop_(loop), options_(std::move(options)), handler_(handler) {}

LocalSocketServer::~LocalSocketServer() { Stop(); }

absl::Status LocalSocketServer::CheckExistingPath() const {
  const std::string& path = options_.path;
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return absl::OkStatus();  // nothing there
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "local socket ", path, " exists and is not a socket; refusing to replace it"));
  }
  // A socket file: is a daemon still serving on it?
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Errno("socket");
  sockaddr_un addr;
  FillAddress(path, &addr);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  if (live) {
    return absl::FailedPreconditionError(
        absl::StrCat("local socket ", path, " is in use by another running daemon"));
  }
  return absl::OkStatus();  // stale: Start() renames over it
}

absl::Status LocalSocketServer::Start() {
  const std::string& path = options_.path;
  if (auto s = MakeDirs(Dirname(path)); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("local socket ", path, ": ", s.message()));
  }
  if (auto s = CheckExistingPath(); !s.ok()) return s;
  gid_t gid = static_cast<gid_t>(-1);
  if (!options_.group.empty()) {
    group* g = getgrnam(options_.group.c_str());
    if (g == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("socket_group '", options_.group, "' not found"));
    }
    gid = g->gr_gid;
  }
  auto policy = MakePeerPolicy(options_.peer_policy, options_.allowed_group, options_.group);
  if (!policy.ok()) return policy.status();
  policy_ = *policy;
  const std::string temp = absl::StrCat(path, ".tmp.", getpid());
  sockaddr_un addr;
  if (!FillAddress(temp, &addr)) {
    return absl::InvalidArgumentError(absl::StrCat("local socket path too long: ", path));
  }
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return Errno("socket(AF_UNIX)");
  unlink(temp.c_str());
  auto fail = [&](const std::string& what) {
    absl::Status s = Errno(absl::StrCat("local socket ", path, ": ", what));
    unlink(temp.c_str());
    close(listen_fd_);
    listen_fd_ = -1;
    return s;
  };
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return fail("bind");
  if (chmod(temp.c_str(), 0660) != 0) return fail("chmod 0660");
  if (gid != static_cast<gid_t>(-1) && chown(temp.c_str(), -1, gid) != 0) return fail("chown");
  if (listen(listen_fd_, SOMAXCONN) != 0) return fail("listen");
  if (rename(temp.c_str(), path.c_str()) != 0) return fail("rename into place");
  struct stat st;
  if (stat(path.c_str(), &st) == 0) socket_inode_ = st.st_ino;
  loop_.WatchFd(listen_fd_, EPOLLIN, [this](uint32_t) { Accept(); });
  return absl::OkStatus();
}

void LocalSocketServer::Accept() {
  for (;;) {
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The pending connection stays queued and the listening socket stays readable: stop
        // watching it for a moment instead of spinning, and say so once per pause.
        const absl::Time now = absl::Now();
        if (now - last_accept_warning_ > absl::Seconds(10)) {  // at most one line per 10 s
          last_accept_warning_ = now;
          Logger("local")->warn(
              "accept failed error=\"{}\" clients={}; pausing accepts for 100ms (raise the "
              "open file limit?)",
              std::strerror(errno), sessions_.size());
        }
        loop_.UnwatchFd(listen_fd_);
        accept_paused_ = true;
        loop_.PostAfter(absl::Milliseconds(100), [this] {
          if (!accept_paused_ || listen_fd_ < 0) return;
          accept_paused_ = false;
          loop_.WatchFd(listen_fd_, EPOLLIN, [this](uint32_t) { Accept(); });
        });
      } else if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) {
        Logger("local")->warn("accept failed error=\"{}\"", std::strerror(errno));
      }
      return;
    }
    ucred cred{};
    socklen_t len = sizeof(cred);
    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len);
    const PeerCredentials creds{cred.pid, cred.uid, cred.gid};
    if (auto allowed = CheckPeer(policy_, cred.uid, cred.gid, PeerGroups(fd)); !allowed.ok()) {
      Refuse(fd, creds, allowed);
      continue;
    }
    if (static_cast<int>(sessions_.size()) >= options_.max_clients) {
      Refuse(fd, creds, absl::ResourceExhaustedError(absl::StrCat(
                            "too many local clients: this daemon serves at most ",
                            options_.max_clients, " (max_clients)")));
      continue;
    }
    // The session asks the loop for EPOLLOUT (from any thread) when its outbox fills, or to be
    // closed when it was cut off for not reading.
    auto want_writable = [this, fd]() {
      loop_.Post([this, fd] {
        auto it = sessions_.find(fd);
        if (it == sessions_.end()) return;
        if (it->second->cut_off()) {
          CutOff(it->second);
        } else {
          Watch(it->second, /*writable=*/true);
        }
      });
    };
    auto session = std::make_shared<Session>(fd, creds, options_.max_input_bytes_per_process,
                                             std::move(want_writable), options_.max_outbox_bytes);
    sessions_[fd] = session;
    Watch(session, /*writable=*/false);
    std::weak_ptr<Session> weak = session;
    loop_.PostAfter(options_.hello_timeout, [this, fd, weak] { HelloDeadline(fd, weak); });
    Logger("local")->debug("client connected pid={} uid={} gid={}", cred.pid, cred.uid, cred.gid);
  }
}

void LocalSocketServer::Refuse(int fd, const PeerCredentials& creds, const absl::Status& why) {
  Logger("local")->warn("refused client pid={} uid={} gid={} error=\"{}\"", creds.pid, creds.uid,
                        creds.gid, why.message());
  // A fresh socket's send buffer is empty: this cannot block or be short.
  SendMessage(fd, EncodeError(wire::MsgType::kError, 0, static_cast<int32_t>(why.code()),
                              std::string(why.message())),
              -1);
  // Closing now would fail the HELLO the client is about to send (EPIPE), or reset the
  // connection before it reads the ERROR if the HELLO was already queued. So: end our side
  // (the client reads the ERROR, then EOF), discard what it sends, and close once it hangs up or
  // after a second. Bounded: past kMaxLingering refused sockets, close at once.
  constexpr size_t kMaxLingering = 256;
  if (lingering_.size() >= kMaxLingering) {
    close(fd);
    return;
  }
  shutdown(fd, SHUT_WR);
  const uint64_t id = ++next_linger_id_;
  lingering_[fd] = id;
  loop_.WatchFd(fd, EPOLLIN | EPOLLRDHUP, [this, fd](uint32_t events) {
    char sink[512];
    while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
    }
    if (events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)) EndLinger(fd);
  });
  loop_.PostAfter(absl::Seconds(1), [this, fd, id] {
    auto it = lingering_.find(fd);
    if (it != lingering_.end() && it->second == id) EndLinger(fd);
  });
}

void LocalSocketServer::EndLinger(int fd) {
  if (lingering_.erase(fd) == 0) return;
  loop_.UnwatchFd(fd);
  close(fd);
}

void LocalSocketServer::CutOff(const std::shared_ptr<Session>& session) {
  if (sessions_.count(session->fd()) == 0) return;
  // A send that failed because the process died is not a slow reader: say which it was.
  if (session->peer_gone()) {
    CloseSession(session, "exited or closed its connection");
    return;
  }
  const std::string why = absl::StrCat("stopped reading its completions (more than ",
                                       options_.max_outbox_bytes, " bytes queued)");
  Logger("local")->warn("dropping client pid={} job={} rank={}: {}", session->creds().pid,
                        session->job.empty() ? "-" : session->job, session->rank, why);
  CloseSession(session, why);
}

void LocalSocketServer::HelloDeadline(int fd, std::weak_ptr<Session> weak) {
  auto session = weak.lock();
  if (session == nullptr) return;
  auto it = sessions_.find(fd);
  if (it == sessions_.end() || it->second != session || !session->job.empty() ||
      session->welcomed) {
    return;
  }
  const std::string why =
      absl::StrCat("did not register (HELLO) within ", FormatDurationShort(options_.hello_timeout));
  Logger("local")->warn("dropping client pid={} uid={}: {}", session->creds().pid,
                        session->creds().uid, why);
  session->Send(EncodeError(wire::MsgType::kError, 0,
                            static_cast<int32_t>(absl::StatusCode::kDeadlineExceeded), why));
  CloseSession(session, why);
}

void LocalSocketServer::Watch(const std::shared_ptr<Session>& session, bool writable) {
  std::weak_ptr<Session> weak = session;
  loop_.WatchFd(session->fd(), EPOLLIN | EPOLLRDHUP | (writable ? static_cast<uint32_t>(EPOLLOUT) : 0u),
                [this, weak](uint32_t events) {
                  if (auto s = weak.lock()) OnReadable(s, events);
                });
}

void LocalSocketServer::OnReadable(const std::shared_ptr<Session>& session, uint32_t events) {
  if (events & EPOLLOUT) {
    if (session->FlushOutbox()) Watch(session, /*writable=*/false);
  }
  if (session->cut_off()) {
    CutOff(session);
    return;
  }
  // Bounded batch per wake-up, so one busy client cannot starve the loop (level-triggered epoll
  // calls again for the rest). A hang-up counts only once every queued frame was read: a client's
  // last frames (its RELEASEs and BYE) arrive together with its hang-up.
  bool drained = false;
  for (int i = 0; i < 64; ++i) {
    auto message = RecvMessage(session->fd(), wire::kMaxFrameBytes);
    if (!message.ok()) {
      if (message.status().code() == absl::StatusCode::kResourceExhausted) {
        drained = true;
        break;
      }
      CloseSession(session, "exited or closed its connection");
      return;
    }
    session->last_activity = absl::Now();
    if (message->truncated || message->extra_fds) {
      if (message->fd >= 0) close(message->fd);
      const std::string why = message->truncated
                                  ? absl::StrCat("bad frame: larger than ", wire::kMaxFrameBytes,
                                                 " bytes")
                                  : "bad frame: more than one file descriptor";
      Logger("local")->warn("rejected frame pid={} error=\"{}\"", session->creds().pid, why);
      session->Send(EncodeError(wire::MsgType::kError, 0,
                                static_cast<int32_t>(absl::StatusCode::kInvalidArgument), why));
      continue;
    }
    auto frame = DecodeFrame(reinterpret_cast<const uint8_t*>(message->bytes.data()),
                             message->bytes.size(), message->fd >= 0);
    if (!frame.ok()) {
      if (message->fd >= 0) close(message->fd);
      uint64_t request_id = 0;
      if (message->bytes.size() >= sizeof(wire::FrameHeader)) {
        memcpy(&request_id, message->bytes.data() + offsetof(wire::FrameHeader, request_id),
               sizeof(request_id));
      }
      Logger("local")->warn("rejected frame pid={} error=\"{}\"", session->creds().pid,
                            frame.status().message());
      session->Send(EncodeError(wire::MsgType::kError, request_id,
                                static_cast<int32_t>(frame.status().code()),
                                std::string(frame.status().message())));
      continue;
    }
    if (frame->type == wire::MsgType::kBye) {
      CloseSession(session, "shut down (BYE)", /*graceful=*/true);
      return;
    }
    handler_.OnFrame(session, *std::move(frame), message->fd);
    if (session->closed()) return;
  }
  if (drained && (events & (EPOLLHUP | EPOLLERR))) {
    CloseSession(session, "exited or closed its connection");
  }
}

void LocalSocketServer::CloseSession(const std::shared_ptr<Session>& caller_session,
                                     const std::string& why, bool graceful) {
  // The caller's reference may be the one sessions_ holds (Stop): keep the session alive past
  // the erase below.
  const std::shared_ptr<Session> session = caller_session;
  if (sessions_.erase(session->fd()) == 0) return;
  loop_.UnwatchFd(session->fd());
  session->Close();
  Logger("local")->debug("client disconnected pid={} reason=\"{}\"", session->creds().pid, why);
  handler_.OnClosed(session, graceful, why);
}

void LocalSocketServer::Stop() {
  while (!sessions_.empty()) CloseSession(sessions_.begin()->second, "daemon shutting down");
  while (!lingering_.empty()) EndLinger(lingering_.begin()->first);
  if (listen_fd_ >= 0) {
    if (!accept_paused_) loop_.UnwatchFd(listen_fd_);
    accept_paused_ = false;
    // Unlink only if the path is still our socket (another daemon may have replaced it).
    struct stat on_disk;
    if (stat(options_.path.c_str(), &on_disk) == 0 && on_disk.st_ino == socket_inode_) {
      unlink(options_.path.c_str());
    }
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

}  // namespace ard::local
