// Who may use the local socket (DaemonConfig.peer_policy): decided from the connecting process's
// SO_PEERCRED uid/gid and its supplementary groups (SO_PEERGROUPS), on top of the socket file's
// mode. Root (uid 0) is always accepted: it can read any process's memory, so refusing it would
// protect nothing. Pure logic; any thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ard::local {

struct PeerPolicy {
  enum class Kind { kSameUser, kGroup, kAny };
  Kind kind = Kind::kSameUser;
  uid_t daemon_uid = 0;
  gid_t group = 0;  // kGroup: members of this group are accepted too
};

// Parses peer_policy/allowed_group; `fallback_group` (socket_group) names the group when
// allowed_group is empty, and the daemon's primary group is used when both are.
absl::StatusOr<PeerPolicy> MakePeerPolicy(const std::string& policy,
                                          const std::string& allowed_group,
                                          const std::string& fallback_group);

// OK, or PermissionDenied explaining the refusal.
absl::Status CheckPeer(const PeerPolicy& policy, uid_t uid, gid_t gid,
                       const std::vector<gid_t>& groups);

// The supplementary groups of the process at the other end of a connected Unix socket.
std::vector<gid_t> PeerGroups(int fd);

}  // namespace ard::local
