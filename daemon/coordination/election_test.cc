#include "daemon/coordination/election.h"

#include "catch2/catch.hpp"

namespace ard::coordination {
namespace {

const CoordinatorId kSelf{"a", "10.0.0.1:7070", "i-a"};
const CoordinatorId kOther{"b", "10.0.0.2:7070", "i-b"};
const absl::Time kT0 = absl::FromUnixSeconds(1000);

EtcdKey Key(const CoordinatorId& holder, int64_t revision, int64_t lease) {
  return EtcdKey{EncodeCoordinator(holder), revision, lease};
}

Election Leading(int64_t revision = 7) {
  Election e(kSelf, absl::Seconds(3), absl::Milliseconds(500));
  e.OnRead(std::optional<EtcdKey>());
  REQUIRE(e.Next() == Election::Action::kCampaign);
  e.OnCampaign(Key(kSelf, revision, 42), 42, kT0);
  REQUIRE(e.view().role == Role::kCoordinator);
  return e;
}

TEST_CASE("the key's value round-trips and a malformed one is refused") {
  auto id = DecodeCoordinator(EncodeCoordinator(kOther));
  REQUIRE(id.ok());
  CHECK(*id == kOther);
  CHECK(absl::IsInvalidArgument(DecodeCoordinator("just-a-host").status()));
}

TEST_CASE("a daemon follows the key's holder, and campaigns once the key is gone") {
  Election e(kSelf, absl::Seconds(3), absl::Milliseconds(500));
  CHECK(e.Next() == Election::Action::kRead);
  e.OnRead(std::optional<EtcdKey>(Key(kOther, 5, 9)));
  CHECK(e.view().role == Role::kFollower);
  CHECK(e.view().term == 5);
  CHECK(e.view().coordinator == kOther);
  e.OnRead(std::optional<EtcdKey>());
  CHECK(e.view().term == 0);
  CHECK(e.reason() == "coordinator gone (its lease expired)");
  CHECK(e.Next() == Election::Action::kCampaign);
}

TEST_CASE("a lost campaign follows the winner and revokes the unused lease") {
  Election e(kSelf, absl::Seconds(3), absl::Milliseconds(500));
  e.OnRead(std::optional<EtcdKey>());
  e.OnCampaign(Key(kOther, 8, 11), 12, kT0);
  CHECK(e.view().role == Role::kFollower);
  CHECK(e.view().term == 8);
  CHECK(e.Next() == Election::Action::kRevoke);
  CHECK(e.to_revoke() == 12);
  e.OnRevoked(absl::OkStatus());
  CHECK(e.Next() == Election::Action::kRead);
}

TEST_CASE("a coordinator renews every quarter TTL and is fenced before etcd can expire it") {
  Election e = Leading();
  CHECK(e.Next() == Election::Action::kKeepAlive);
  CHECK(e.NextKeepAlive() == kT0 + absl::Milliseconds(750));
  e.OnKeepAlive(absl::OkStatus(), kT0 + absl::Seconds(1));
  e.OnKeepAlive(absl::UnavailableError("etcd down"), kT0 + absl::Seconds(2));
  CHECK(e.etcd_error() == "etcd down");
  e.Tick(kT0 + absl::Milliseconds(3400));
  CHECK(!e.view().fenced);
  e.Tick(kT0 + absl::Milliseconds(3500));  // 1 s (last good send) + 3 s - 0.5 s
  CHECK(e.view().fenced);
  CHECK(e.view().role == Role::kCoordinator);
  CHECK(e.view().term == 7);
  // etcd answers again and the lease held: no longer fenced, same term.
  e.OnKeepAlive(absl::OkStatus(), kT0 + absl::Seconds(4));
  CHECK(!e.view().fenced);
  CHECK(e.view().term == 7);
  CHECK(e.etcd_error().empty());
}

TEST_CASE("a fenced coordinator whose lease expired wins a new term, or follows the new one") {
  Election e = Leading();
  e.OnKeepAlive(absl::NotFoundError("expired"), kT0 + absl::Seconds(5));
  CHECK(e.view().fenced);
  CHECK(e.Next() == Election::Action::kRead);
  SECTION("nobody took over: re-elected, same daemon, a new term") {
    e.OnRead(std::optional<EtcdKey>());
    CHECK(e.view().role == Role::kCoordinator);
    CHECK(e.Next() == Election::Action::kCampaign);
    e.OnCampaign(Key(kSelf, 20, 43), 43, kT0 + absl::Seconds(6));
    CHECK(e.view().term == 20);
    CHECK(!e.view().fenced);
    CHECK(e.reason() == "re-elected (etcd answered again)");
  }
  SECTION("another daemon was elected: it steps down and follows") {
    e.OnRead(std::optional<EtcdKey>(Key(kOther, 15, 50)));
    CHECK(e.view().role == Role::kFollower);
    CHECK(e.view().term == 15);
    CHECK(e.view().coordinator == kOther);
  }
}

TEST_CASE("a newer term named by a follower steps a coordinator down at once") {
  Election e = Leading(7);
  e.OnNewerTerm(7);
  CHECK(e.view().role == Role::kCoordinator);
  e.OnNewerTerm(9);
  CHECK(e.view().role == Role::kNone);
  CHECK(e.Next() == Election::Action::kRevoke);
  CHECK(e.to_revoke() == 42);
}

TEST_CASE("an etcd error keeps a follower's view; resigning frees the lease") {
  Election e(kSelf, absl::Seconds(3), absl::Milliseconds(500));
  e.OnRead(std::optional<EtcdKey>(Key(kOther, 5, 9)));
  e.OnRead(absl::UnavailableError("etcd 127.0.0.1:1: Range: connection refused"));
  CHECK(e.view().term == 5);
  CHECK(e.etcd_error() == "etcd 127.0.0.1:1: Range: connection refused");
  Election l = Leading();
  l.Resign();
  CHECK(l.view().role == Role::kNone);
  CHECK(l.to_revoke() == 42);
}

}  // namespace
}  // namespace ard::coordination
