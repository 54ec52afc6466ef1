// The local channel's listening socket (DESIGN.md "Local channel"): a SOCK_SEQPACKET Unix socket
// that training processes on this host connect to. This issue creates, secures and serves the
// socket (accept, peer credentials, hang-up); the wire protocol arrives with the client library.
//
// Threads: Start/Stop from the Daemon's thread; one epoll thread ("ard-local") owns every
// connection.
// Lifecycle: 1. Start() creates the parent directory, binds under a temporary name, sets mode
// 0660 (and the group), then rename()s over the final path: a stale socket file is replaced
// atomically, a live daemon's socket is never stolen, and anything that is not a socket is never
// deleted; 2. the epoll thread accepts and records SO_PEERCRED; 3. Stop() wakes it through an
// eventfd, joins it, closes every connection and unlinks the socket file it created.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace ard::local {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

class LocalSocketServer {
 public:
  // `group`: name of the group that owns the socket; empty keeps the daemon's primary group.
  LocalSocketServer(std::string path, std::string group);
  ~LocalSocketServer();

  absl::Status Start();
  void Stop();

  const std::string& path() const { return path_; }
  int connection_count() const;

 private:
  absl::Status PrepareParentDirectory() const;
  absl::Status CheckExistingPath() const;
  void Run();
  void Accept();
  void CloseConnection(int fd);

  const std::string path_;
  const std::string group_;
  int listen_fd_ = -1;
  ino_t socket_inode_ = 0;  // of the file at path_ we created
  int wake_fd_ = -1;
  int epoll_fd_ = -1;
  std::thread thread_;
  mutable absl::Mutex mu_;
  std::map<int, PeerCredentials> connections_ ABSL_GUARDED_BY(mu_);  // by fd
};

}  // namespace ard::local
