// The daemon's local admin socket (DESIGN.md "Admin channel"): a Unix stream socket, open to every
// local user, whose connections the daemon accepts itself, reads the caller's uid from
// SO_PEERCRED, and hands to the gRPC server (AddInsecureChannelFromFd). The gRPC call's peer is
// then "fd:N", which PeerUid() maps back to that uid: the identity `forget` and `abort` check.
//
// Thread: one accept thread ("ard-admin"); PeerUid() from any thread (gRPC handlers).
// Lifecycle: 1. Start(path, server) binds (replacing a stale socket file) and starts accepting;
// 2. Stop() (or the destructor) closes the listener, joins the thread and removes the file.
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/server.h"

namespace ard::rpc {

class AdminSocket {
 public:
  AdminSocket() = default;
  ~AdminSocket() { Stop(); }
  AdminSocket(const AdminSocket&) = delete;
  AdminSocket& operator=(const AdminSocket&) = delete;

  // `server` must outlive Stop().
  absl::Status Start(const std::string& path, grpc::Server* server);
  void Stop();

  // The uid of the process on the admin connection whose gRPC peer string is `peer` ("fd:N");
  // none for any other connection.
  std::optional<uid_t> PeerUid(const std::string& peer) const;

 private:
  void AcceptLoop();

  std::string path_;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  grpc::Server* server_ = nullptr;  // Not owned.
  std::thread thread_;
  mutable absl::Mutex mu_;
  std::map<int, uid_t> uid_by_fd_ ABSL_GUARDED_BY(mu_);  // set before the fd is handed over
};

}  // namespace ard::rpc
