// The handshake on every daemon-to-daemon data connection (DESIGN.md "Data plane", "Security"):
// a challenge-response in which both hosts prove they hold the job's per-generation secret
// (data_auth.h) before any tensor byte moves. The dialer is always the smaller host index.
//
//   1. dialer   -> acceptor  DataHello (48 bytes): job, generation, host indices, dialer nonce
//   2. acceptor -> dialer    the acceptor's nonce (kNonceBytes), sent once the hello is valid
//   3. dialer   -> acceptor  the dialer's proof (kProofBytes): HMAC over both nonces and the hello
//   4. acceptor -> dialer    the acceptor's proof, sent when the acceptor's job takes the
//                            connection and has checked the dialer's proof (DataListener)
// Anything else is closed by the acceptor. After step 4 both ends agree on encryption and may run
// TLS (secure_mesh.h); then the connection carries checksummed transfers (tcp_mesh.h).
//
// Layout: fixed sizes, little-endian, no padding. Tensor bytes that follow are in the hosts'
// native layout, so every host of a job must be little-endian (checked at compile time below).
// Header-only, pure values: any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the TCP data plane ships tensors and handshakes in little-endian layout");

namespace ard::dataplane::tcp {

inline constexpr uint32_t kDataMagic = 0x54445241;  // "ARDT" in memory
// 1: a 24-byte unauthenticated header; 2: this challenge-response and checksummed transfers;
// 3: then one byte each way saying whether the connection runs TLS (secure_mesh.h); 4: each
// transfer's checksum is XXH3's 64 bits (stream_checksum.h), no longer a CRC32C.
inline constexpr uint32_t kDataVersion = 4;
// Largest host index a handshake may name (a sanity bound, far above any real job).
inline constexpr uint32_t kMaxHosts = 1u << 16;
inline constexpr size_t kNonceBytes = 16;
inline constexpr size_t kProofBytes = 32;  // HMAC-SHA256

struct DataHello {
  uint32_t magic;              // kDataMagic; set by the dialer
  uint32_t version;            // kDataVersion; a mismatch is rejected (no negotiation)
  uint64_t job_id;             // the job whose mesh this connection belongs to
  uint64_t generation;         // the job's generation (JobLayout.generation) the dialer runs
  uint32_t from_host;          // cross rank of the dialing host within the job (the smaller index)
  uint32_t to_host;            // cross rank of the accepting host within the job (the larger index)
  uint8_t nonce[kNonceBytes];  // fresh random bytes of the dialer
};
static_assert(sizeof(DataHello) == 48, "wire layout");

// The first bytes of a hello that identify the protocol: checked as soon as they arrive, so that
// a dialer of another release (or anything else) is refused without waiting for 48 bytes.
inline constexpr size_t kHelloPrefixBytes = 8;

inline absl::Status ValidateHelloPrefix(uint32_t magic, uint32_t version) {
  if (magic != kDataMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad data handshake magic 0x", absl::Hex(magic)));
  }
  if (version != kDataVersion) {
    return absl::InvalidArgumentError(absl::StrCat("data handshake version ", version,
                                                   ", expected ", kDataVersion,
                                                   " (a daemon of another allreduced release)"));
  }
  return absl::OkStatus();
}

// OK for a hello the listener may answer; InvalidArgument naming the bad field otherwise.
inline absl::Status ValidateHello(const DataHello& h) {
  absl::Status prefix = ValidateHelloPrefix(h.magic, h.version);
  if (!prefix.ok()) return prefix;
  // Host i dials only hosts j > i (TcpMesh::Connect), so from < to on every valid connection.
  if (h.to_host >= kMaxHosts || h.from_host >= h.to_host) {
    return absl::InvalidArgumentError(
        absl::StrCat("data handshake hosts from=", h.from_host, " to=", h.to_host, " are invalid"));
  }
  if (h.generation == 0) return absl::InvalidArgumentError("data handshake generation 0");
  return absl::OkStatus();
}

// Reads a DataHello from bytes arriving in pieces (the listener's non-blocking reads; the
// fuzzer). 1. Remaining() is where the next bytes go; 2. Advance(n) after n bytes landed there
// returns the first error as soon as the bytes show it; 3. done() once the hello is whole and
// valid, then hello() holds it.
class HelloReader {
 public:
  absl::Span<uint8_t> Remaining() {
    return absl::MakeSpan(bytes_ + received_, sizeof(DataHello) - received_);
  }
  absl::Status Advance(size_t n) {
    const size_t before = received_;
    received_ += n;
    if (before < kHelloPrefixBytes && received_ >= kHelloPrefixBytes) {
      uint32_t magic, version;
      std::memcpy(&magic, bytes_, 4);
      std::memcpy(&version, bytes_ + 4, 4);
      absl::Status prefix = ValidateHelloPrefix(magic, version);
      if (!prefix.ok()) return prefix;
    }
    if (received_ < sizeof(DataHello)) return absl::OkStatus();
    std::memcpy(&hello_, bytes_, sizeof hello_);
    return ValidateHello(hello_);
  }
  bool done() const { return received_ == sizeof(DataHello); }
  const DataHello& hello() const { return hello_; }

 private:
  uint8_t bytes_[sizeof(DataHello)] = {};
  size_t received_ = 0;
  DataHello hello_{};
};

}  // namespace ard::dataplane::tcp
