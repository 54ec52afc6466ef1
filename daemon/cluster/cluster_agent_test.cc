// The follower role against a scripted coordinator (FakeMembershipClient): join retries with backoff,
// heartbeats, rejoin on REJOIN, stop on SUPERSEDED, Leave, and status forwarding; joining stops
// for good on a refused host name or another protocol version.
#include "daemon/cluster/cluster_agent.h"

#include <deque>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "catch2/catch.hpp"
#include "daemon/common/version.h"

namespace ard::cluster {
namespace {

// Answers each call from a script (a queue per method); an empty queue means UNAVAILABLE.
class FakeMembershipClient : public MembershipClient {
 public:
  void JoinAsync(const JoinRequest& request, Done<JoinResponse> done) override {
    Answer(&joins_, &join_script_, request, std::move(done));
  }
  void HeartbeatAsync(const HeartbeatRequest& request, Done<HeartbeatResponse> done) override {
    Answer(&heartbeats_, &heartbeat_script_, request, std::move(done));
  }
  void LeaveAsync(const LeaveRequest& request, Done<LeaveResponse> done) override {
    Answer(&leaves_, &leave_script_, request, std::move(done));
  }
  void GetClusterStatusAsync(const GetClusterStatusRequest& request,
                             Done<GetClusterStatusResponse> done) override {
    std::vector<GetClusterStatusRequest> unused;
    Answer(&unused, &status_script_, request, std::move(done));
  }
  void IdentifyAsync(const IdentifyRequest& request, Done<IdentifyResponse> done) override {
    std::vector<IdentifyRequest> unused;
    Answer(&unused, &identify_script_, request, std::move(done));
  }

  template <typename T>
  void Script(std::deque<absl::StatusOr<T>>* script, absl::StatusOr<T> r) {
    absl::MutexLock lock(&mu_);
    script->push_back(std::move(r));
  }
  int joins() { absl::MutexLock lock(&mu_); return joins_.size(); }
  int heartbeats() { absl::MutexLock lock(&mu_); return heartbeats_.size(); }
  std::vector<JoinRequest> join_requests() { absl::MutexLock lock(&mu_); return joins_; }
  std::vector<LeaveRequest> leave_requests() { absl::MutexLock lock(&mu_); return leaves_; }
  std::vector<HeartbeatRequest> heartbeat_requests() {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }

  std::deque<absl::StatusOr<JoinResponse>> join_script_;
  std::deque<absl::StatusOr<HeartbeatResponse>> heartbeat_script_;
  std::deque<absl::StatusOr<LeaveResponse>> leave_script_;
  std::deque<absl::StatusOr<GetClusterStatusResponse>> status_script_;
  std::deque<absl::StatusOr<IdentifyResponse>> identify_script_;

 private:
  template <typename Req, typename Resp>
  void Answer(std::vector<Req>* log, std::deque<absl::StatusOr<Resp>>* script, const Req& request,
              Done<Resp> done) {
    absl::StatusOr<Resp> r = absl::UnavailableError("scripted: coordinator down");
    {
      absl::MutexLock lock(&mu_);
      log->push_back(request);
      if (!script->empty()) {
        r = std::move(script->front());
        script->pop_front();
      }
    }
    done(std::move(r));
  }

  absl::Mutex mu_;
  std::vector<JoinRequest> joins_;
  std::vector<HeartbeatRequest> heartbeats_;
  std::vector<LeaveRequest> leaves_;
};

JoinResponse Joined(uint32_t incarnation) {
  JoinResponse r;
  r.set_incarnation(incarnation);
  r.set_coordinator("coord");
  r.set_heartbeat_ms(5);
  r.set_protocol_version(kProtocolVersion);
  return r;
}

HeartbeatResponse Verdict(HeartbeatResponse::Verdict v) {
  HeartbeatResponse r;
  r.set_verdict(v);
  return r;
}

HostInfo Self() {
  HostInfo h;
  h.set_name("b");
  h.set_address("127.0.0.1:1234");
  h.set_instance_id("b1");
  return h;
}

template <typename Pred>
bool Eventually(Pred pred) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return false;
}

AgentOptions Options() {
  return AgentOptions{"coord:7070", absl::Milliseconds(5), absl::Milliseconds(1),
                      absl::Milliseconds(4)};
}

TEST_CASE("retries Join until the coordinator answers, then heartbeats with its incarnation") {
  FakeMembershipClient peer;
  // Two failures, then success.
  peer.Script(&peer.join_script_, absl::StatusOr<JoinResponse>(absl::UnavailableError("down")));
  peer.Script(&peer.join_script_, absl::StatusOr<JoinResponse>(absl::UnavailableError("down")));
  peer.Script(&peer.join_script_, absl::StatusOr<JoinResponse>(Joined(7)));
  for (int i = 0; i < 1000; ++i) {
    peer.Script(&peer.heartbeat_script_,
                absl::StatusOr<HeartbeatResponse>(Verdict(HeartbeatResponse::OK)));
  }
  EventLoop loop("test");
  ClusterAgent agent(loop, peer, "b", Options());
  loop.Start();
  agent.Start(Self());
  REQUIRE(Eventually([&] { return peer.heartbeats() >= 3; }));
  CHECK(peer.joins() == 3);
  CHECK(peer.join_requests()[0].host().address() == "127.0.0.1:1234");
  CHECK(peer.heartbeat_requests()[0].incarnation() == 7);
  CHECK(peer.heartbeat_requests()[0].instance_id() == "b1");

  peer.Script(&peer.leave_script_, absl::StatusOr<LeaveResponse>(LeaveResponse()));
  absl::Notification left;
  agent.LeaveAsync([&] { left.Notify(); });
  REQUIRE(left.WaitForNotificationWithTimeout(absl::Seconds(10)));
  REQUIRE(peer.leave_requests().size() == 1);
  CHECK(peer.leave_requests()[0].incarnation() == 7);
  // No heartbeats after leaving.
  const int beats = peer.heartbeats();
  absl::SleepFor(absl::Milliseconds(30));
  CHECK(peer.heartbeats() <= beats + 1);  // at most the one already in flight
  loop.Stop();
}

TEST_CASE("REJOIN makes the agent join again; SUPERSEDED stops it") {
  FakeMembershipClient peer;
  peer.Script(&peer.join_script_, absl::StatusOr<JoinResponse>(Joined(1)));
  peer.Script(&peer.heartbeat_script_,
              absl::StatusOr<HeartbeatResponse>(Verdict(HeartbeatResponse::REJOIN)));
  peer.Script(&peer.join_script_, absl::StatusOr<JoinResponse>(Joined(2)));
  peer.Script(&peer.heartbeat_script_,
              absl::StatusOr<HeartbeatResponse>(Verdict(HeartbeatResponse::SUPERSEDED)));
  EventLoop loop("test");
  ClusterAgent agent(loop, peer, "b", Options());
  loop.Start();
  agent.Start(Self());
  REQUIRE(Eventually([&] { return peer.heartbeats() >= 2; }));
  absl::SleepFor(absl::Milliseconds(50));
  CHECK(peer.joins() == 2);
  CHECK(peer.heartbeats() == 2);  // stopped after SUPERSEDED
  CHECK(peer.heartbeat_requests()[1].incarnation() == 2);
  // Leave after being superseded sends nothing (the name is someone else's now).
  absl::Notification left;
  agent.LeaveAsync([&] { left.Notify(); });
  REQUIRE(left.WaitForNotificationWithTimeout(absl::Seconds(10)));
  CHECK(peer.leave_requests().empty());
  loop.Stop();
}

TEST_CASE("a host name refused as held by a live daemon stops joining and reports it once") {
  FakeMembershipClient peer;
  peer.Script(&peer.join_script_, absl::StatusOr<JoinResponse>(absl::UnavailableError("down")));
  peer.Script(&peer.join_script_, absl::StatusOr<JoinResponse>(absl::AlreadyExistsError(
                                      "host name 'b' is held by the live member at x")));
  absl::Mutex mu;
  std::vector<std::string> refusals;
  AgentOptions options = Options();
  options.on_refused = [&](const absl::Status& s) {
    absl::MutexLock lock(&mu);
    refusals.push_back(std::string(s.message()));
  };
  EventLoop loop("test");
  ClusterAgent agent(loop, peer, "b", options);
  loop.Start();
  agent.Start(Self());
  REQUIRE(Eventually([&] {
    absl::MutexLock lock(&mu);
    return !refusals.empty();
  }));
  // Identify answers with this daemon's own HostInfo, whatever its state.
  absl::Notification identified;
  absl::StatusOr<IdentifyResponse> me;
  agent.HandleIdentify({}, [&](absl::StatusOr<IdentifyResponse> r) {
    me = std::move(r);
    identified.Notify();
  });
  REQUIRE(identified.WaitForNotificationWithTimeout(absl::Seconds(10)));
  REQUIRE(me.ok());
  CHECK(me->host().instance_id() == "b1");
  CHECK(me->host().address() == "127.0.0.1:1234");
  absl::SleepFor(absl::Milliseconds(30));  // the backoff is 1-4 ms: retries would show by now
  CHECK(peer.joins() == 2);
  absl::Notification left;
  agent.LeaveAsync([&] { left.Notify(); });
  REQUIRE(left.WaitForNotificationWithTimeout(absl::Seconds(10)));
  CHECK(peer.leave_requests().empty());  // never joined: nothing to leave
  loop.Stop();
  REQUIRE(refusals == std::vector<std::string>{"host name 'b' is held by the live member at x"});
}

TEST_CASE("another protocol version, refused or answered by the coordinator, stops joining") {
  JoinResponse old = Joined(1);
  old.set_protocol_version(0);  // a coordinator from before the field accepts anyone
  const bool refused_here = GENERATE(false, true);
  FakeMembershipClient peer;
  peer.Script(&peer.join_script_, refused_here
                                      ? absl::StatusOr<JoinResponse>(old)
                                      : absl::StatusOr<JoinResponse>(absl::UnimplementedError(
                                            "the daemon at x speaks protocol version 2")));
  peer.Script(&peer.join_script_, absl::StatusOr<JoinResponse>(Joined(2)));
  absl::Mutex mu;
  std::vector<absl::Status> refusals;
  AgentOptions options = Options();
  options.on_refused = [&](const absl::Status& s) {
    absl::MutexLock lock(&mu);
    refusals.push_back(s);
  };
  EventLoop loop("test");
  ClusterAgent agent(loop, peer, "b", options);
  loop.Start();
  agent.Start(Self());
  REQUIRE(Eventually([&] {
    absl::MutexLock lock(&mu);
    return !refusals.empty();
  }));
  absl::SleepFor(absl::Milliseconds(30));  // the backoff is 1-4 ms: retries would show by now
  CHECK(peer.joins() == 1);
  CHECK(peer.heartbeats() == 0);
  loop.Stop();
  REQUIRE(refusals.size() == 1);
  CHECK(refusals[0].code() == absl::StatusCode::kUnimplemented);
  if (refused_here) {
    CHECK(refusals[0].message() ==
          absl::StrCat("the coordinator coord at coord:7070 speaks protocol version 0, this daemon "
                       "(allreduced ",
                       kVersion, ") version ", kProtocolVersion,
                       ": run one allreduced release on every host"));
  }
}

absl::StatusOr<GetClusterStatusResponse> Status(ClusterAgent& agent) {
  absl::Notification answered;
  absl::StatusOr<GetClusterStatusResponse> got;
  agent.HandleGetClusterStatus({}, [&](absl::StatusOr<GetClusterStatusResponse> r) {
    got = std::move(r);
    answered.Notify();
  });
  REQUIRE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  return got;
}

TEST_CASE("status requests are forwarded and marked; a cut-off follower gives its local view") {
  FakeMembershipClient peer;
  GetClusterStatusResponse canned;
  canned.mutable_view()->set_coordinator("coord");
  peer.Script(&peer.status_script_, absl::StatusOr<GetClusterStatusResponse>(canned));
  AgentOptions options = Options();
  options.local_jobs = [] {
    JobSummary job;
    job.set_name("train");
    return std::vector<JobSummary>{job};
  };
  EventLoop loop("test");
  ClusterAgent agent(loop, peer, "b", options);
  loop.Start();
  agent.Start(Self());
  // Not joined yet: every Join fails (empty script).
  REQUIRE(Eventually([&] { return peer.joins() >= 2; }));
  absl::StatusOr<GetClusterStatusResponse> got = Status(agent);
  REQUIRE(got.ok());
  CHECK(got->forwarded());
  CHECK(got->answered_by() == "b");
  CHECK(got->view().coordinator() == "coord");
  CHECK(got->cluster_view_error().empty());
  CHECK(got->local().membership() == "joining");

  got = Status(agent);  // the coordinator does not answer
  REQUIRE(got.ok());
  CHECK(!got->forwarded());
  CHECK(got->answered_by() == "b");
  CHECK(got->view().hosts().empty());
  CHECK(got->cluster_view_error() ==
        "host b cannot reach the coordinator at coord:7070: scripted: coordinator down");
  const LocalView& local = got->local();
  CHECK(local.host() == "b");
  CHECK(local.address() == "127.0.0.1:1234");
  CHECK(local.role() == "follower");
  CHECK(local.coordinator_address() == "coord:7070");
  CHECK(local.membership() == "joining");
  CHECK(local.incarnation() == 0);
  CHECK(local.join_attempts() >= 2);
  CHECK(local.last_error() == "UNAVAILABLE: scripted: coordinator down");
  CHECK(local.last_contact_age_s() == -1);
  REQUIRE(local.jobs_size() == 1);
  CHECK(local.jobs(0).name() == "train");
  // Cluster RPCs sent to a follower name the real coordinator.
  absl::Status join_status;
  agent.HandleJoin({}, [&](absl::StatusOr<JoinResponse> r) { join_status = r.status(); });
  CHECK(join_status.code() == absl::StatusCode::kFailedPrecondition);
  loop.Stop();
}

TEST_CASE("a coordinator silent for a host timeout is reported once as a cut-off") {
  FakeMembershipClient peer;
  JoinResponse joined = Joined(1);
  joined.set_host_timeout_ms(40);
  peer.Script(&peer.join_script_, absl::StatusOr<JoinResponse>(joined));
  for (int i = 0; i < 3; ++i) {
    peer.Script(&peer.heartbeat_script_,
                absl::StatusOr<HeartbeatResponse>(Verdict(HeartbeatResponse::OK)));
  }
  // Then every heartbeat fails (empty script: UNAVAILABLE).
  absl::Mutex mu;
  std::vector<std::string> cut_offs;
  AgentOptions options = Options();
  options.on_cut_off = [&](const absl::Status& s) {
    absl::MutexLock lock(&mu);
    cut_offs.push_back(std::string(s.message()));
  };
  EventLoop loop("test");
  ClusterAgent agent(loop, peer, "b", options);
  loop.Start();
  agent.Start(Self());
  REQUIRE(Eventually([&] {
    absl::MutexLock lock(&mu);
    return !cut_offs.empty();
  }));
  const int beats = peer.heartbeats();
  REQUIRE(Eventually([&] { return peer.heartbeats() >= beats + 5; }));
  absl::StatusOr<GetClusterStatusResponse> status = Status(agent);
  REQUIRE(status.ok());
  CHECK(status->local().membership() == "cut_off");
  CHECK(status->local().incarnation() == 1);
  CHECK(status->local().last_contact_age_s() >= 0.04);
  loop.Stop();
  REQUIRE(cut_offs.size() == 1);  // once per loss of contact, however many beats fail
  CHECK(cut_offs[0].rfind("host b lost contact with the coordinator at coord:7070 for ", 0) == 0);
}

}  // namespace
}  // namespace ard::cluster
