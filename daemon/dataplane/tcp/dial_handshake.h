// The dialing end of the data-plane handshake (handshake.h): steps 1 and 3, and the check of the
// acceptor's proof (step 4). Split in two so that a host can dial all its higher peers before it
// takes the connections of its lower ones, and check their proofs after (TcpMesh::Connect): the
// acceptor sends its proof only when its own job takes the connection.
// Stateless functions over a caller-owned, connected, non-blocking socket: any thread.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/dataplane/tcp/data_auth.h"
#include "daemon/dataplane/tcp/handshake.h"

namespace ard::dataplane::tcp {

// Who dials whom for which job generation, with the job's secret (kJobSecretBytes).
struct DialIdentity {
  uint64_t job_id = 0;
  uint64_t generation = 0;
  uint32_t from_host = 0;
  uint32_t to_host = 0;
  std::string_view secret;
};

// What the dialer keeps between the two halves.
struct DialerHandshake {
  DataHello hello{};
  Nonce acceptor_nonce{};
};

// Steps 1-3: sends a hello with a fresh nonce, reads the acceptor's nonce, sends this host's
// proof. Unavailable when the acceptor closes (it refused the hello: e.g. another release),
// DeadlineExceeded past `deadline`, Internal if no random nonce can be made.
absl::StatusOr<DialerHandshake> StartDialerHandshake(int fd, const DialIdentity& who,
                                                     absl::Time deadline);

// Step 4: reads the acceptor's proof and checks it. Unauthenticated when it does not prove the
// job's secret, or when the acceptor closes instead of answering (it refused this host's proof).
absl::Status FinishDialerHandshake(int fd, const DialerHandshake& handshake,
                                   std::string_view secret, absl::Time deadline);

}  // namespace ard::dataplane::tcp
