// The allreduced version: reported to peers, printed by `allreduced --version` and
// `allreducectl --version` (the one source of both); and the version of the protocol daemons
// speak to each other.
#pragma once

#include <cstdint>

namespace ard {

inline constexpr char kVersion[] = "0.1.0";

// The daemon-to-daemon protocol (proto/cluster.proto, proto/negotiation.proto), sent at Join
// (HostInfo.protocol_version) and answered (JoinResponse.protocol_version): the coordinator
// refuses a daemon of another version and a follower leaves a coordinator of another version,
// as neither could read the other's messages right. Bump it when a message changes meaning.
// 0: daemons older than the field; 1: the first with it (JobEvent's compact response form,
// JobLayout.JobHost.registered_local_ranks); 2: JobLayout.data_secret and the authenticated,
// checksummed data plane (dataplane/tcp/handshake.h kDataVersion 2); 3: the data plane's
// encryption byte and optional TLS (kDataVersion 3, data_plane_tls); 4: the data plane's
// transfers end with XXH3's 64 bits instead of a CRC32C (kDataVersion 4).
inline constexpr uint32_t kProtocolVersion = 4;

}  // namespace ard
