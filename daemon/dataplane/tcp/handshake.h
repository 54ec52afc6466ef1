// The first bytes on every daemon-to-daemon data connection (DESIGN.md "Data plane"): the dialing
// host sends one DataHandshake, the accepting host's DataListener validates it and parks the
// connection under (job_id, from_host) until that job's TcpMesh takes it. Nothing is sent back.
// After the handshake the connection carries raw tensor bytes only: both ends know every transfer
// size from the collective they run, so there is no framing.
//
// Layout: fixed 24 bytes, little-endian, no padding. Tensor bytes that follow are in the hosts'
// native layout, so every host of a job must be little-endian (checked at compile time below).
// Header-only, pure values: any thread.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the TCP data plane ships tensors and handshakes in little-endian layout");

namespace ard::dataplane::tcp {

inline constexpr uint32_t kDataMagic = 0x54445241;  // "ARDT" in memory
inline constexpr uint32_t kDataVersion = 1;
// Largest host index a handshake may name (a sanity bound, far above any real job).
inline constexpr uint32_t kMaxHosts = 1u << 16;

struct DataHandshake {
  uint32_t magic;      // kDataMagic; set by the dialer
  uint32_t version;    // kDataVersion; a mismatch is rejected (no negotiation)
  uint64_t job_id;     // the job whose mesh this connection belongs to
  uint32_t from_host;  // cross rank of the dialing host within the job (the smaller index)
  uint32_t to_host;    // cross rank of the accepting host within the job (the larger index)
};
static_assert(sizeof(DataHandshake) == 24, "wire layout");

inline DataHandshake MakeHandshake(uint64_t job_id, uint32_t from_host, uint32_t to_host) {
  return DataHandshake{kDataMagic, kDataVersion, job_id, from_host, to_host};
}

// OK for a handshake the listener may park; InvalidArgument naming the bad field otherwise.
inline absl::Status ValidateHandshake(const DataHandshake& h) {
  if (h.magic != kDataMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad data handshake magic 0x", absl::Hex(h.magic)));
  }
  if (h.version != kDataVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("data handshake version ", h.version, ", expected ", kDataVersion));
  }
  // Host i dials only hosts j > i (TcpMesh::Connect), so from < to on every valid connection.
  if (h.to_host >= kMaxHosts || h.from_host >= h.to_host) {
    return absl::InvalidArgumentError(
        absl::StrCat("data handshake hosts from=", h.from_host, " to=", h.to_host, " are invalid"));
  }
  return absl::OkStatus();
}

}  // namespace ard::dataplane::tcp
