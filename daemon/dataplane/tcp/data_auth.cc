#include "daemon/dataplane/tcp/data_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstring>

#include "daemon/common/status_macros.h"

namespace ard::dataplane::tcp {

absl::StatusOr<std::string> NewJobSecret() {
  std::string secret(kJobSecretBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(secret.data()), kJobSecretBytes) != 1) {
    return absl::InternalError("RAND_bytes failed: cannot make a data-plane job secret");
  }
  return secret;
}

absl::StatusOr<Nonce> NewNonce() {
  Nonce nonce;
  if (RAND_bytes(nonce.data(), nonce.size()) != 1) {
    return absl::InternalError("RAND_bytes failed: cannot make a data-plane handshake nonce");
  }
  return nonce;
}

Proof ComputeProof(std::string_view secret, ProofRole role, const DataHello& hello,
                   const Nonce& acceptor_nonce) {
  ARD_CHECK(secret.size() == kJobSecretBytes);
  uint8_t message[1 + sizeof(DataHello) + kNonceBytes];
  message[0] = static_cast<uint8_t>(role);
  std::memcpy(message + 1, &hello, sizeof hello);
  std::memcpy(message + 1 + sizeof hello, acceptor_nonce.data(), kNonceBytes);
  Proof proof{};
  unsigned int length = 0;
  const unsigned char* mac = HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
                                  message, sizeof message, proof.data(), &length);
  ARD_CHECK(mac != nullptr && length == proof.size());
  return proof;
}

bool ProofsEqual(const Proof& a, const Proof& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace ard::dataplane::tcp
