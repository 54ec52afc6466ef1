#include "daemon/local/peer_policy.h"

#include <unistd.h>

#include "catch2/catch.hpp"

namespace ard::local {
namespace {

PeerPolicy Policy(PeerPolicy::Kind kind) {
  PeerPolicy p;
  p.kind = kind;
  p.daemon_uid = 1000;
  p.group = 500;
  return p;
}

TEST_CASE("same_user accepts the daemon's uid and root only") {
  const PeerPolicy p = Policy(PeerPolicy::Kind::kSameUser);
  CHECK(CheckPeer(p, 1000, 1000, {}).ok());
  CHECK(CheckPeer(p, 0, 0, {}).ok());
  const absl::Status other = CheckPeer(p, 1001, 500, {500});
  CHECK(other.code() == absl::StatusCode::kPermissionDenied);
  CHECK(other.message().find("uid 1001") != absl::string_view::npos);
}

TEST_CASE("group accepts members by primary or supplementary group") {
  const PeerPolicy p = Policy(PeerPolicy::Kind::kGroup);
  CHECK(CheckPeer(p, 1001, 500, {}).ok());
  CHECK(CheckPeer(p, 1002, 1002, {7, 500}).ok());
  CHECK(CheckPeer(p, 1000, 1000, {}).ok());
  CHECK(CheckPeer(p, 1003, 1003, {7, 8}).code() == absl::StatusCode::kPermissionDenied);
}

TEST_CASE("any accepts everyone") {
  CHECK(CheckPeer(Policy(PeerPolicy::Kind::kAny), 4242, 4242, {}).ok());
}

TEST_CASE("MakePeerPolicy parses the config") {
  auto same = MakePeerPolicy("same_user", "", "");
  REQUIRE(same.ok());
  CHECK(same->kind == PeerPolicy::Kind::kSameUser);
  CHECK(same->daemon_uid == geteuid());
  auto group = MakePeerPolicy("group", "", "");
  REQUIRE(group.ok());
  CHECK(group->group == getegid());
  auto root = MakePeerPolicy("group", "root", "");
  REQUIRE(root.ok());
  CHECK(root->group == 0);
  CHECK(MakePeerPolicy("group", "no-such-group-ard", "").status().code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(MakePeerPolicy("everyone", "", "").status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ard::local
