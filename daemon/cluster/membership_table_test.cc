#include "daemon/cluster/membership_table.h"

#include "catch2/catch.hpp"

namespace ard::cluster {
namespace {

HostInfo Info(const std::string& name, const std::string& instance) {
  HostInfo h;
  h.set_name(name);
  h.set_address(name + ":7070");
  h.set_instance_id(instance);
  return h;
}

HeartbeatRequest Beat(const std::string& name, uint32_t inc, const std::string& instance) {
  HeartbeatRequest r;
  r.set_host_name(name);
  r.set_incarnation(inc);
  r.set_instance_id(instance);
  return r;
}

Host Find(const ClusterView& v, const std::string& name) {
  for (const Host& h : v.hosts()) {
    if (h.name() == name) return h;
  }
  FAIL("host " << name << " not in view");
  return Host();
}

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);
const absl::Duration kTimeout = absl::Seconds(5);

TEST_CASE("coordinator is in its own view and always UP") {
  MembershipTable t(Info("coord", "c1"), kTimeout, kT0);
  ClusterView v = t.View(kT0 + absl::Hours(1));
  REQUIRE(v.hosts_size() == 1);
  CHECK(v.coordinator() == "coord");
  CHECK(Find(v, "coord").state() == UP);
  CHECK(Find(v, "coord").coordinator());
  CHECK(t.Sweep(kT0 + absl::Hours(1)).empty());
}

TEST_CASE("join, heartbeat, timeout, rejoin with a new incarnation") {
  MembershipTable t(Info("coord", "c1"), kTimeout, kT0);
  auto inc = t.Join(Info("b", "b1"), kT0);
  REQUIRE(inc.ok());
  CHECK(*inc == 1);
  std::string detail;
  CHECK(t.Heartbeat(Beat("b", 1, "b1"), kT0 + absl::Seconds(4), &detail) == HeartbeatResponse::OK);
  // Silent for 5 s after the last heartbeat is still within the timeout; 5.1 s is not.
  CHECK(t.Sweep(kT0 + absl::Seconds(9)).empty());
  uint64_t epoch = t.epoch();
  CHECK(t.Sweep(kT0 + absl::Milliseconds(9100)) == std::vector<std::string>{"b"});
  CHECK(t.epoch() == epoch + 1);
  const Host& b = Find(t.View(kT0 + absl::Seconds(10)), "b");
  CHECK(b.state() == DOWN);
  CHECK(b.down_reason().find("missed heartbeats") != std::string::npos);
  // The same process heartbeats again: it must rejoin, and gets a new incarnation.
  CHECK(t.Heartbeat(Beat("b", 1, "b1"), kT0 + absl::Seconds(11), &detail) ==
        HeartbeatResponse::REJOIN);
  CHECK(detail.find("DOWN") != std::string::npos);
  auto inc2 = t.Join(Info("b", "b1"), kT0 + absl::Seconds(11));
  REQUIRE(inc2.ok());
  CHECK(*inc2 == 2);
  CHECK(Find(t.View(kT0 + absl::Seconds(11)), "b").state() == UP);
}

TEST_CASE("a retried Join from the same process keeps its incarnation") {
  MembershipTable t(Info("coord", "c1"), kTimeout, kT0);
  REQUIRE(*t.Join(Info("b", "b1"), kT0) == 1);
  uint64_t epoch = t.epoch();
  REQUIRE(*t.Join(Info("b", "b1"), kT0 + absl::Seconds(1)) == 1);
  CHECK(t.epoch() == epoch);
}

TEST_CASE("a restarted daemon takes over its name; the old process is told SUPERSEDED") {
  MembershipTable t(Info("coord", "c1"), kTimeout, kT0);
  REQUIRE(*t.Join(Info("b", "b1"), kT0) == 1);
  REQUIRE(*t.Join(Info("b", "b2"), kT0 + absl::Seconds(1)) == 2);
  std::string detail;
  CHECK(t.Heartbeat(Beat("b", 1, "b1"), kT0 + absl::Seconds(2), &detail) ==
        HeartbeatResponse::SUPERSEDED);
  CHECK(t.Heartbeat(Beat("b", 2, "b2"), kT0 + absl::Seconds(2), &detail) ==
        HeartbeatResponse::OK);
}

TEST_CASE("a name held UP by another instance has a live holder to ask; free or DOWN ones not") {
  MembershipTable t(Info("coord", "c1"), kTimeout, kT0);
  CHECK(!t.OtherLiveHolder(Info("b", "b1")));  // free
  REQUIRE(*t.Join(Info("b", "b1"), kT0) == 1);
  CHECK(!t.OtherLiveHolder(Info("b", "b1")));  // its own instance
  std::optional<HostInfo> holder = t.OtherLiveHolder(Info("b", "b2"));
  REQUIRE(holder);
  CHECK(holder->instance_id() == "b1");
  CHECK(holder->address() == "b:7070");
  t.Sweep(kT0 + kTimeout + absl::Seconds(1));
  CHECK(!t.OtherLiveHolder(Info("b", "b2")));  // DOWN: free to take
}

TEST_CASE("unknown hosts are told to rejoin; the coordinator's name cannot be taken") {
  MembershipTable t(Info("coord", "c1"), kTimeout, kT0);
  std::string detail;
  CHECK(t.Heartbeat(Beat("ghost", 3, "g"), kT0, &detail) == HeartbeatResponse::REJOIN);
  auto r = t.Join(Info("coord", "other"), kT0);
  CHECK(r.status().code() == absl::StatusCode::kAlreadyExists);
  CHECK(r.status().message() ==
        "host name 'coord' is held by the live coordinator at coord:7070 (instance c1, pid 0); "
        "refused the daemon at coord:7070 (instance other, pid 0): give each daemon its own "
        "host_name");
  CHECK(!t.OtherLiveHolder(Info("coord", "other")));  // Join refuses it without asking
  CHECK(!t.Join(Info("", "x"), kT0).ok());
  CHECK(t.Join(Info("bad\nname", "x"), kT0).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(!t.Join(Info(std::string(65, 'h'), "x"), kT0).ok());
  HostInfo no_address = Info("c", "c1");
  no_address.clear_address();
  CHECK(!t.Join(no_address, kT0).ok());
}

TEST_CASE("Leave marks DOWN at once; a stale Leave is ignored") {
  MembershipTable t(Info("coord", "c1"), kTimeout, kT0);
  REQUIRE(*t.Join(Info("b", "b1"), kT0) == 1);
  LeaveRequest stale;
  stale.set_host_name("b");
  stale.set_incarnation(7);
  stale.set_instance_id("b1");
  t.Leave(stale, kT0);
  CHECK(Find(t.View(kT0), "b").state() == UP);
  LeaveRequest leave = stale;
  leave.set_incarnation(1);
  t.Leave(leave, kT0);
  const Host& b = Find(t.View(kT0), "b");
  CHECK(b.state() == DOWN);
  CHECK(b.down_reason() == "left the cluster");
}

TEST_CASE("the view carries each host's local socket, for launchers") {
  MembershipTable t(Info("coord", "c1"), kTimeout, kT0);
  HostInfo b = Info("b", "b1");
  b.set_local_socket("/run/b/allreduced.sock");
  REQUIRE(t.Join(b, kT0).ok());
  CHECK(Find(t.View(kT0), "b").local_socket() == "/run/b/allreduced.sock");
}

TEST_CASE("view is sorted by name") {
  MembershipTable t(Info("m", "c1"), kTimeout, kT0);
  REQUIRE(t.Join(Info("z", "z1"), kT0).ok());
  REQUIRE(t.Join(Info("a", "a1"), kT0).ok());
  ClusterView v = t.View(kT0);
  REQUIRE(v.hosts_size() == 3);
  CHECK(v.hosts(0).name() == "a");
  CHECK(v.hosts(1).name() == "m");
  CHECK(v.hosts(2).name() == "z");
}

}  // namespace
}  // namespace ard::cluster
