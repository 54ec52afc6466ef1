// The last step of forming a job's TCP mesh (tcp_mesh.h), between the job-secret handshake
// (handshake.h) and the first transfer: both ends of every connection say whether they encrypt
// (one byte each way, so a host with data_plane_tls and one without fail the job with a message
// that says so instead of reading each other's bytes as garbage), then, when they do, the TLS 1.3
// handshakes (data_tls.h) of all the host's connections run at once, so no order of hosts can
// deadlock. A byte changed on the way can only make the two ends disagree: each end encrypts
// exactly when its own config says so, so nothing can talk a host out of encrypting.
// A stateless function over the caller's connected, non-blocking sockets: the mesh's thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/dataplane/tcp/data_tls.h"
#include "daemon/dataplane/tcp/socket_util.h"

namespace ard::dataplane::tcp {

struct SecureMeshInput {
  uint64_t job_id = 0;
  int self = 0;
  const std::vector<int>* peers = nullptr;              // host indexes with a connection
  const std::vector<UniqueFd>* fds = nullptr;           // index = host
  const std::vector<std::string>* addresses = nullptr;  // index = host: "HOST:PORT"
  const DataTlsContext* tls = nullptr;                  // null: plaintext (authenticated only)
};

// Index = host: the TLS stream of every peer's connection, or all null when `tls` is null.
// FailedPrecondition naming the host whose data_plane_tls setting differs from this host's;
// the TlsStream::Handshake errors, and DeadlineExceeded past `deadline`, naming the host.
absl::StatusOr<std::vector<std::unique_ptr<TlsStream>>> SecureMesh(const SecureMeshInput& in,
                                                                   absl::Time deadline);

// "HOST" of "HOST:PORT" or "[V6]:PORT" (what a peer's certificate must name).
std::string HostOf(const std::string& host_port);

}  // namespace ard::dataplane::tcp
