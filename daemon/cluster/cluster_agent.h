// The follower role: joins the coordinator (retrying with exponential backoff while it is not
// up), heartbeats, rejoins when the coordinator says so, and forwards cluster-status requests to
// the coordinator, adding its own LocalView (which is all it returns, with the reason, when the
// coordinator cannot be reached). Rejects Join/Heartbeat/Leave sent to it, naming the real
// coordinator; answers Identify with its own HostInfo. State lives on the control loop;
// MembershipClient callbacks post back to it.
//
// Lifecycle: 1. construct with the loop and a MembershipClient to the coordinator; 2. Start(self),
// once this daemon's bound address is known, begins joining (a Join refused with ALREADY_EXISTS,
// the host name being held by another live daemon, or with UNIMPLEMENTED, another protocol version,
// or answered by a coordinator of another protocol version, ends joining for good:
// options.on_refused);
// 3. LeaveAsync() on shutdown stops heartbeats and tells the coordinator; 4. destroy after the
// MembershipClient (which drains calls in flight) and after the loop has stopped.
#pragma once

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "daemon/cluster/handlers.h"
#include "daemon/cluster/membership_client.h"
#include "daemon/common/event_loop.h"
#include "daemon/timeline/clock_offset.h"

namespace ard::cluster {

struct AgentOptions {
  std::string coordinator_address;
  absl::Duration heartbeat = absl::Seconds(1);
  absl::Duration backoff_initial = absl::Milliseconds(100);
  absl::Duration backoff_max = absl::Seconds(5);
  LocalJobsSource local_jobs;  // reported with every heartbeat; may be empty
  // The coordinator's host timeout until its JoinResponse says otherwise.
  absl::Duration host_timeout = absl::Seconds(10);
  // Called (loop thread) once this host has had no answer from the coordinator for a host
  // timeout, or the coordinator asked it to rejoin: the cluster has marked it DOWN and aborted
  // its cross-host jobs, so their local ranks must fail too. May be empty.
  std::function<void(const absl::Status&)> on_cut_off;
  // Called (loop thread) once when the coordinator refuses this daemon's host name because another
  // live daemon holds it (ALREADY_EXISTS), or the two speak different protocol versions
  // (UNIMPLEMENTED): the agent stops joining for good; the daemon should exit. May be empty.
  std::function<void(const absl::Status&)> on_refused;
  // Coordinator failover (etcd): the term of the coordinator this agent joins (0: the
  // single-coordinator mode). Sent with Join and Heartbeat; an answer of an older term is a stale
  // coordinator's (an error), one of a newer term the same coordinator re-elected (adopted).
  uint64_t term = 0;
};

class ClusterAgent : public ClusterHandler, public AdminHandler {
 public:
  ClusterAgent(EventLoop& loop, MembershipClient& coordinator, std::string self_name,
               AgentOptions options);

  void Start(const HostInfo& self);
  // Stops heartbeating and sends Leave if joined; `done` runs once the coordinator answered or
  // the call failed (any thread).
  void LeaveAsync(std::function<void()> done);

  // Loop thread: joined and in contact with the coordinator (the health service's SERVING).
  bool MemberOnLoop() const { return state_ == State::kJoined && !cut_off_reported_; }
  // Loop thread: joined and the coordinator answered the last call (failover reads etcd sooner
  // when it did not).
  bool AnsweredOnLoop() const { return state_ == State::kJoined && coordinator_reachable_; }
  // The coordinator's clock minus this host's, from heartbeats (timeline alignment). Loop only.
  const timeline::ClockOffset& clock_offset() const { return clock_; }

  void HandleJoin(const JoinRequest& request, Done<JoinResponse> done) override;
  void HandleHeartbeat(const HeartbeatRequest& request, Done<HeartbeatResponse> done) override;
  void HandleLeave(const LeaveRequest& request, Done<LeaveResponse> done) override;
  void HandleIdentify(const IdentifyRequest& request, Done<IdentifyResponse> done) override;
  void HandleGetClusterStatus(const GetClusterStatusRequest& request,
                              Done<GetClusterStatusResponse> done) override;

 private:
  enum class State { kJoining, kJoined, kSuperseded, kRefused, kLeft };

  void JoinOnLoop();
  void OnJoined(absl::StatusOr<JoinResponse> response);
  void HeartbeatOnLoop(uint64_t generation);
  void OnHeartbeat(uint64_t generation, absl::StatusOr<HeartbeatResponse> response);
  void NoteCoordinatorUnreachable(const absl::Status& status, const char* call);
  LocalView LocalViewOnLoop() const;
  // Reports the cut-off (once per loss of contact) when the coordinator has been silent for a
  // host timeout; `last_error` is the latest failed call's status.
  void CheckCutOff(const absl::Status& last_error);
  absl::Status NotCoordinator() const;
  // An error when an answer of `term` comes from a stale coordinator; adopts a newer term.
  absl::Status CheckTerm(uint64_t term);

  EventLoop& loop_;
  MembershipClient& coordinator_;  // Not owned.
  const std::string self_name_;
  const AgentOptions options_;

  // Loop thread only.
  HostInfo self_;
  State state_ = State::kJoining;
  uint32_t incarnation_ = 0;
  uint64_t term_ = 0;        // options.term, then a newer one the coordinator answered with
  uint64_t generation_ = 0;  // bumped on every (re)join; stale heartbeat timers see a mismatch
  absl::Duration heartbeat_;
  absl::Duration backoff_;
  int join_attempts_ = 0;
  bool coordinator_reachable_ = true;
  absl::Duration host_timeout_;
  absl::Time last_contact_ = absl::InfinitePast();  // last answer from the coordinator
  timeline::ClockOffset clock_;
  std::string last_error_;  // the latest failed call to the coordinator; cleared by an answer
  bool cut_off_reported_ = false;
};

}  // namespace ard::cluster
