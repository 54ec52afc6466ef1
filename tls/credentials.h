// Optional mutual TLS for the cluster and admin gRPC channels (DESIGN.md "Cluster channel"):
// from the config's tls_cert_file / tls_key_file / tls_ca_file. When set, the daemon's server
// requires and verifies a client certificate signed by the CA, and the daemon's own calls (to
// the coordinator, forwarded admin calls) and allreducectl present theirs; peers and CLIs
// without one are refused during the handshake. When none is set everything is plaintext.
// The TCP data plane is not covered (it carries tensors, not control).
// Any thread; called at startup.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace ard::tls {

struct CredentialFiles {
  std::string cert_file;  // PEM certificate of this daemon (or CLI)
  std::string key_file;   // its PEM private key
  std::string ca_file;    // PEM CA certificate(s) that peers' certificates must chain to

  bool enabled() const { return !cert_file.empty() || !key_file.empty() || !ca_file.empty(); }
};

// InvalidArgument when only some of the three files are set; NotFound / InvalidArgument naming a
// file that cannot be read or is empty. Insecure credentials when TLS is off.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const CredentialFiles& files);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const CredentialFiles& files);

}  // namespace ard::tls
