// `allreducectl forget HOST` and `allreducectl abort JOB` (docs/operator-guide.md "allreducectl:
// every command"): mutations, sent over the local daemon's admin socket (the daemon checks the
// caller's uid) or to --daemon over TCP, where the daemon accepts them only with mutual TLS.
#pragma once

#include <string>

#include "tls/credentials.h"

namespace ard::ctl {

// The admin socket of a daemon run with the default local_socket.
inline constexpr char kDefaultAdminSocket[] = "/run/allreduced/allreduced.sock.admin";

// `command`: "forget" or "abort"; `target`: the host or job. `tcp`: to `daemon` over TCP (mutual
// TLS when `tls` is set; plaintext is refused by the daemon); else to `admin_socket` (empty:
// $ALLREDUCED_ADMIN_SOCKET, else kDefaultAdminSocket). Returns the exit status: 0 done, 1 refused
// or unreachable.
int AdminMain(const std::string& command, const std::string& target,
              const std::string& admin_socket, const std::string& daemon,
              const tls::CredentialFiles& tls, int timeout_ms, bool tcp);

}  // namespace ard::ctl
