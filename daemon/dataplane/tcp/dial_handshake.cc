#include "daemon/dataplane/tcp/dial_handshake.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "daemon/common/status_macros.h"
#include "daemon/dataplane/tcp/socket_util.h"

namespace ard::dataplane::tcp {

absl::StatusOr<DialerHandshake> StartDialerHandshake(int fd, const DialIdentity& who,
                                                     absl::Time deadline) {
  DialerHandshake h;
  h.hello.magic = kDataMagic;
  h.hello.version = kDataVersion;
  h.hello.job_id = who.job_id;
  h.hello.generation = who.generation;
  h.hello.from_host = who.from_host;
  h.hello.to_host = who.to_host;
  ARD_ASSIGN_OR_RETURN(const Nonce nonce, NewNonce());
  std::memcpy(h.hello.nonce, nonce.data(), nonce.size());
  ARD_RETURN_IF_ERROR(WriteAll(fd, &h.hello, sizeof h.hello, deadline));
  const absl::Status got = ReadAll(fd, h.acceptor_nonce.data(), h.acceptor_nonce.size(), deadline);
  if (absl::IsUnavailable(got)) {
    return absl::UnavailableError(
        absl::StrCat("the peer refused the data handshake (", got.message(),
                     "): it runs another allreduced release, or is not an allreduced data port"));
  }
  ARD_RETURN_IF_ERROR(got);
  const Proof proof = ComputeProof(who.secret, ProofRole::kDialer, h.hello, h.acceptor_nonce);
  ARD_RETURN_IF_ERROR(WriteAll(fd, proof.data(), proof.size(), deadline));
  return h;
}

absl::Status FinishDialerHandshake(int fd, const DialerHandshake& handshake,
                                   std::string_view secret, absl::Time deadline) {
  Proof theirs{};
  const absl::Status got = ReadAll(fd, theirs.data(), theirs.size(), deadline);
  if (absl::IsUnavailable(got)) {
    return absl::UnauthenticatedError(absl::StrCat(
        "the peer closed the connection instead of proving the job secret (", got.message(),
        "): it refused this host's proof (another generation of the job?)"));
  }
  ARD_RETURN_IF_ERROR(got);
  const Proof expected =
      ComputeProof(secret, ProofRole::kAcceptor, handshake.hello, handshake.acceptor_nonce);
  if (!ProofsEqual(theirs, expected)) {
    return absl::UnauthenticatedError(
        "the peer's proof does not match the job secret: it is not the job's host");
  }
  return absl::OkStatus();
}

}  // namespace ard::dataplane::tcp
