// The steady state of one cross-host job (DESIGN.md "Steady state without the coordinator"): the
// job's readiness rounds (negotiation::SteadyRounds) driven from its executor thread over its TCP
// mesh (dataplane::IdleRounds), fed from the control loop with host-ready tensors and the
// coordinator's lists; carried data is reduced by the data plane's kernels
// (dataplane::HostRoundReducer). Owned by the job's SteadyNegotiator.
//
// Threads: Offer/Received/SetJoinPending/SubmittedPartly/TakeUnrun on the control loop;
// AwaitRound/RunRound on the executor thread; Abort on any. The round state is shared under a
// mutex; an eventfd wakes the idle executor when the loop changed something.
//
// When this host votes: RunRound (a change here, or a peer's round message) first waits, at most
// PartialWait::bound, while a cached tensor that some local ranks submitted and others not yet
// could still be offered (negotiation::SteadyRounds::awaited): a host whose ranks are a moment
// apart then votes ready in the round the first host started, instead of agreeing nothing in it
// and needing another. The vote is the same function of the state as without the wait.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/dataplane/idle_rounds.h"
#include "daemon/dataplane/tcp/tcp_mesh.h"
#include "daemon/negotiation/steady_rounds.h"

namespace ard::jobs {

// How long a vote waits for partly submitted cached tensors (bound 0: never), and `waited`,
// called on the executor thread after each wait (ran_out: the bound passed first; may be null).
struct PartialWait {
  absl::Duration bound = absl::ZeroDuration();  // DaemonConfig.steady_round_partial_wait_us
  std::function<void(bool ran_out)> waited;
};

class SteadyState : public dataplane::IdleRounds {
 public:
  // `mesh`: the job's connected mesh (executor thread; null before it connected).
  // `to_coordinator`: called on the executor thread with held tensors a round sends to the
  // coordinator (the caller posts them to the loop).
  // `round_data_max_bytes`: DaemonConfig.steady_round_data_max_bytes (0: no data in rounds).
  SteadyState(std::vector<bool> here, uint64_t fusion_threshold_bytes,
              std::function<dataplane::tcp::TcpMesh*()> mesh,
              std::function<void(std::vector<negotiation::ReadyTensor>)> to_coordinator,
              uint64_t round_data_max_bytes, PartialWait partial_wait);
  ~SteadyState() override;
  SteadyState(const SteadyState&) = delete;
  SteadyState& operator=(const SteadyState&) = delete;

  // See negotiation::SteadyRounds. Once the rounds are over, Offer and Received take nothing
  // (false): the caller negotiates centrally and runs lists as they come.
  bool Offer(negotiation::ReadyTensor& tensor);
  bool Received(negotiation::CommittedList& list);
  void SetJoinPending(bool pending);
  // Some but not all local ranks submitted `name` (nothing when the wait is off).
  void SubmittedPartly(const std::string& name);
  // The job failed: held tensors and unreleased lists' tensors (their ranks get the failure).
  std::vector<negotiation::ReadyTensor> TakeUnrun();

  // dataplane::IdleRounds
  absl::StatusOr<bool> AwaitRound(int wakeup_fd, absl::Duration timeout) override;
  absl::StatusOr<std::vector<negotiation::Response>> RunRound() override;
  void Abort(const absl::Status& why) override;
  bool active() const override;

  // Rounds run, tensors they agreed, and of those the ones whose data they carried (for metrics
  // and tests).
  uint64_t rounds() const;
  uint64_t agreed_tensors() const;
  // negotiation::SteadyRounds::template_rank_entries (memory accounting).
  size_t template_rank_entries() const;
  uint64_t carried_tensors() const;

 private:
  void WakeIfChanged() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Delays the vote while partly submitted tensors are awaited, within the bound. Returns
  // whether it waited, and in *ran_out whether the bound passed first.
  bool AwaitPartlySubmitted(bool* ran_out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A peer's connection closed during a round: the rounds are over; held tensors go to the
  // coordinator; returns the unreleased lists' responses, to run now.
  std::vector<negotiation::Response> End(const absl::Status& why);

  const uint64_t fusion_threshold_bytes_;
  const std::function<dataplane::tcp::TcpMesh*()> mesh_;
  const std::function<void(std::vector<negotiation::ReadyTensor>)> to_coordinator_;
  const PartialWait partial_wait_;
  const int changed_fd_;  // eventfd: the loop changed the round state
  // The data plane's kernels, for the carried data (immutable; shared with rounds_).
  const std::shared_ptr<const negotiation::RoundReducer> reducer_;
  mutable absl::Mutex mu_;
  negotiation::SteadyRounds rounds_ ABSL_GUARDED_BY(mu_);
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  bool active_ ABSL_GUARDED_BY(mu_) = true;
  uint64_t rounds_run_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t agreed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t carried_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ard::jobs
