#include "daemon/local/peer_policy.h"

#include <grp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

namespace ard::local {

absl::StatusOr<PeerPolicy> MakePeerPolicy(const std::string& policy,
                                          const std::string& allowed_group,
                                          const std::string& fallback_group) {
  PeerPolicy p;
  p.daemon_uid = geteuid();
  p.group = getegid();
  if (policy.empty() || policy == "same_user") {
    p.kind = PeerPolicy::Kind::kSameUser;
  } else if (policy == "any") {
    p.kind = PeerPolicy::Kind::kAny;
  } else if (policy == "group") {
    p.kind = PeerPolicy::Kind::kGroup;
    const std::string& name = allowed_group.empty() ? fallback_group : allowed_group;
    if (!name.empty()) {
      group* g = getgrnam(name.c_str());
      if (g == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat("allowed_group '", name, "' not found"));
      }
      p.group = g->gr_gid;
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("peer_policy '", policy, "' must be same_user, group or any"));
  }
  return p;
}

absl::Status CheckPeer(const PeerPolicy& policy, uid_t uid, gid_t gid,
                       const std::vector<gid_t>& groups) {
  if (policy.kind == PeerPolicy::Kind::kAny || uid == 0 || uid == policy.daemon_uid) {
    return absl::OkStatus();
  }
  if (policy.kind == PeerPolicy::Kind::kGroup &&
      (gid == policy.group ||
       std::find(groups.begin(), groups.end(), policy.group) != groups.end())) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      policy.kind == PeerPolicy::Kind::kSameUser
          ? absl::StrCat("uid ", uid, " may not use this daemon (peer_policy same_user: only uid ",
                         policy.daemon_uid, " and root)")
          : absl::StrCat("uid ", uid, " gid ", gid,
                         " may not use this daemon (peer_policy group: ", "uid ", policy.daemon_uid,
                         ", root, or members of gid ", policy.group, ")"));
}

std::vector<gid_t> PeerGroups(int fd) {
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    socklen_t len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) == 0) {
      groups.resize(len / sizeof(gid_t));
      return groups;
    }
    if (errno != ERANGE) break;
    groups.resize(len / sizeof(gid_t) + 1);
  }
  return {};
}

}  // namespace ard::local
