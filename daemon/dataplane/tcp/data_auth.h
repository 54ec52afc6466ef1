// Data-plane authentication (DESIGN.md "Security"): the per-generation job secret the coordinator
// issues when it forms a job, the nonces, and the HMAC-SHA256 proofs both ends of a data
// connection exchange (handshake.h has the exchange). OpenSSL does the cryptography; nothing
// here is hand-written. The secret is never logged nor shown: only these functions read it.
// Pure functions: any thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "daemon/dataplane/tcp/handshake.h"

namespace ard::dataplane::tcp {

inline constexpr size_t kJobSecretBytes = 32;

using Nonce = std::array<uint8_t, kNonceBytes>;
using Proof = std::array<uint8_t, kProofBytes>;

// Which end a proof comes from: part of the MAC'd bytes, so one end's proof is never the other's.
enum class ProofRole : uint8_t { kDialer = 1, kAcceptor = 2 };

// kJobSecretBytes fresh bytes from OpenSSL's CSPRNG (RAND_bytes); Internal if it fails.
absl::StatusOr<std::string> NewJobSecret();
// kNonceBytes fresh bytes (RAND_bytes); Internal if it fails.
absl::StatusOr<Nonce> NewNonce();

// HMAC-SHA256 keyed with `secret` over the role, the whole hello (job id, generation, host
// indices, dialer nonce) and the acceptor's nonce. `secret` must be kJobSecretBytes long.
Proof ComputeProof(std::string_view secret, ProofRole role, const DataHello& hello,
                   const Nonce& acceptor_nonce);

// Constant-time comparison (CRYPTO_memcmp): the time taken says nothing about where they differ.
bool ProofsEqual(const Proof& a, const Proof& b);

}  // namespace ard::dataplane::tcp
