// The local channel's listening socket (DESIGN.md "Local channel"): a SOCK_SEQPACKET Unix socket
// that training processes on this host connect to. Accepts clients, records SO_PEERCRED, reads
// and decodes their frames (answering undecodable ones with an ERROR frame) and hands the rest to
// a SessionHandler (the JobRegistry).
//
// Thread: runs on the control loop (no thread of its own): Start/Stop and every callback happen
// there, so a frame reaches negotiation without a thread hop.
// Lifecycle: 1. Start() creates the parent directory, binds under a temporary name, sets mode
// 0660 (and the group), then rename()s over the final path: a stale socket file is replaced
// atomically, a live daemon's socket is never stolen, and anything that is not a socket is never
// deleted; 2. accepted clients become Sessions; 3. Stop() closes every session (telling the
// handler) and unlinks the socket file it created.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/common/event_loop.h"
#include "daemon/local/frame_codec.h"
#include "daemon/local/peer_policy.h"
#include "daemon/local/session.h"

namespace ard::local {

class SessionHandler {
 public:
  virtual ~SessionHandler() = default;
  // A decoded frame; `fd` (>= 0 for HELLO/ADD_SEGMENT) is owned by the handler.
  virtual void OnFrame(const std::shared_ptr<Session>& session, DecodedFrame frame, int fd) = 0;
  // The client said BYE (`graceful`), hung up, or was cut off; the session is already closed.
  virtual void OnClosed(const std::shared_ptr<Session>& session, bool graceful,
                        const std::string& why) = 0;
};

struct LocalSocketOptions {
  std::string path;
  std::string group;  // owns the socket; empty keeps the daemon's primary group
  uint64_t max_input_bytes_per_process = 16ull << 30;
  // Limits on hostile or broken clients (DaemonConfig fields 30-39).
  int max_clients = 4096;
  absl::Duration hello_timeout = absl::Seconds(10);  // to register (a valid HELLO)
  size_t max_outbox_bytes = 64 << 20;
  std::string peer_policy = "same_user";
  std::string allowed_group;
};

class LocalSocketServer {
 public:
  LocalSocketServer(EventLoop& loop, LocalSocketOptions options, SessionHandler& handler);
  ~LocalSocketServer();

  // Any thread before the loop runs, else the loop thread.
  absl::Status Start();
  // Loop thread (or after the loop stopped).
  void Stop();

  const std::string& path() const { return options_.path; }
  int session_count() const { return static_cast<int>(sessions_.size()); }

 private:
  absl::Status CheckExistingPath() const;
  void Accept();
  // Sends one ERROR frame to a client being turned away at accept, logs it, closes `fd`.
  void Refuse(int fd, const PeerCredentials& creds, const absl::Status& why);
  void EndLinger(int fd);
  void HelloDeadline(int fd, std::weak_ptr<Session> weak);
  // Closes a session that stopped reading (its outbox overflowed), with a warning.
  void CutOff(const std::shared_ptr<Session>& session);
  void OnReadable(const std::shared_ptr<Session>& session, uint32_t events);
  void Watch(const std::shared_ptr<Session>& session, bool writable);
  void CloseSession(const std::shared_ptr<Session>& session, const std::string& why,
                    bool graceful = false);

  EventLoop& loop_;
  const LocalSocketOptions options_;
  SessionHandler& handler_;  // Not owned.
  int listen_fd_ = -1;
  ino_t socket_inode_ = 0;  // of the file at path we created
  PeerPolicy policy_;
  bool accept_paused_ = false;  // out of file descriptors: retried after a short pause
  absl::Time last_accept_warning_ = absl::InfinitePast();
  std::map<int, uint64_t> lingering_;  // refused sockets (fd -> id) closing after their ERROR
  uint64_t next_linger_id_ = 0;
  std::map<int, std::shared_ptr<Session>> sessions_;  // by fd; loop thread
};

}  // namespace ard::local
