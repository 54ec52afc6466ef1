// libFuzzer target for what a stranger on the data port controls: the bytes of a data-plane
// handshake (daemon/dataplane/tcp/handshake.h), as the DataListener reads them, in pieces, from
// a non-blocking socket, and the proof that follows (checked as TakeConnection does).
//
// Input: byte 0 picks the size of the pieces (1 + b % 16: the reads the listener sees); the rest
// is the stream a dialer sends: a hello, then a proof. Besides the sanitizers, the target traps
// when the reader breaks a promise: a stream whose first 8 bytes are not this release's magic and
// version is refused by the time those 8 bytes arrived; a hello it accepts names hosts
// from < to < kMaxHosts and a generation other than 0; and a proof checks out only when it is the
// HMAC of the hello under the job's secret.
//
// Build and run: tests/fuzz/run_fuzzer.sh data_handshake (docs/operator-guide.md "Fuzzing").
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "daemon/dataplane/tcp/data_auth.h"
#include "daemon/dataplane/tcp/handshake.h"

namespace {

namespace tcp = ard::dataplane::tcp;

void Require(bool condition) {
  if (!condition) __builtin_trap();
}

const std::string& Secret() {
  static const std::string secret(tcp::kJobSecretBytes, '\x5a');
  return secret;
}

bool PrefixValid(const uint8_t* data, size_t size) {
  if (size < tcp::kHelloPrefixBytes) return true;  // not known yet
  uint32_t magic, version;
  std::memcpy(&magic, data, 4);
  std::memcpy(&version, data + 4, 4);
  return magic == tcp::kDataMagic && version == tcp::kDataVersion;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 16;
  const uint8_t* stream = data + 1;
  const size_t length = size - 1;
  tcp::HelloReader reader;
  size_t used = 0;
  while (!reader.done() && used < length) {
    absl::Span<uint8_t> into = reader.Remaining();
    const size_t n = std::min({piece, into.size(), length - used});
    std::memcpy(into.data(), stream + used, n);
    used += n;
    const absl::Status status = reader.Advance(n);
    if (!status.ok()) return 0;  // the listener closes the connection here
    Require(PrefixValid(stream, used));
  }
  if (!reader.done()) return 0;  // the stream ended inside the hello
  const tcp::DataHello& h = reader.hello();
  Require(h.magic == tcp::kDataMagic && h.version == tcp::kDataVersion);
  Require(h.from_host < h.to_host && h.to_host < tcp::kMaxHosts);
  Require(h.generation != 0);
  // The acceptor's nonce: fixed here (the listener draws it); then the dialer's proof.
  tcp::Nonce nonce;
  nonce.fill(0x11);
  const tcp::Proof dialer = tcp::ComputeProof(Secret(), tcp::ProofRole::kDialer, h, nonce);
  const tcp::Proof acceptor = tcp::ComputeProof(Secret(), tcp::ProofRole::kAcceptor, h, nonce);
  Require(!tcp::ProofsEqual(dialer, acceptor));  // one end's proof never passes for the other's
  if (length - used < tcp::kProofBytes) return 0;
  tcp::Proof sent;
  std::memcpy(sent.data(), stream + used, sent.size());
  Require(tcp::ProofsEqual(sent, dialer) == (std::memcmp(sent.data(), dialer.data(), 32) == 0));
  return 0;
}
