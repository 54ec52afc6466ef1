// The NegotiationClient that a daemon's jobs use under coordinator failover: it forwards to the
// current term's client (gRPC to the elected coordinator, or the loopback into this daemon's own
// JobCoordinator), which the ElectedRole swaps as terms change. A RegisterRanks that finds no
// coordinator, or one that is gone, not yet the coordinator, or does not count this host in yet,
// is retried (every `retry`) until its own timeout, so that the ranks of an elastic job that
// rejoin during a failover reach the new coordinator instead of failing at once.
// Negotiate and WatchJob belong to a running job: they go to the current client (a job of an
// older term fails anyway: its coordinator changed).
// SetTargetOnLoop on the control loop; the calls from any thread; `done` on any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/cluster/negotiation_client.h"
#include "daemon/common/event_loop.h"

namespace ard::coordination {

class TermNegotiation : public cluster::NegotiationClient {
 public:
  // `reserve`: retries stop this long before a RegisterRanks' timeout, so that its caller hears
  // why (the last failover answer) before its own form timer fires.
  TermNegotiation(EventLoop& loop, absl::Duration retry,
                  absl::Duration reserve = absl::ZeroDuration())
      : loop_(loop), retry_(retry), reserve_(reserve) {}

  // `target` (not owned; kept alive by the ElectedRole until shutdown), or null with `why`.
  void SetTargetOnLoop(cluster::NegotiationClient* target, std::string why);
  // Called (loop) before a RegisterRanks goes out: an error holds it back like a failover answer
  // (this daemon's own coordinator is fenced). Set before the first call.
  void SetFormGate(std::function<absl::Status()> gate) { gate_ = std::move(gate); }

  void RegisterRanksAsync(const RegisterRanksRequest& request, absl::Duration timeout,
                          cluster::Done<RegisterRanksResponse> done) override;
  void NegotiateAsync(const NegotiateRequest& request,
                      cluster::Done<NegotiateResponse> done) override;
  std::shared_ptr<cluster::JobWatch> WatchJob(const WatchJobRequest& request,
                                              std::function<void(const JobEvent&)> on_event,
                                              std::function<void(absl::Status)> on_end) override;

 private:
  void RegisterOnLoop(RegisterRanksRequest request, absl::Time deadline,
                      cluster::Done<RegisterRanksResponse> done, absl::Status last);
  cluster::NegotiationClient* Target(absl::Status* why);

  EventLoop& loop_;
  const absl::Duration retry_;
  const absl::Duration reserve_;
  std::function<absl::Status()> gate_;  // loop thread
  absl::Mutex mu_;
  cluster::NegotiationClient* target_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::string why_ ABSL_GUARDED_BY(mu_) = "no coordinator elected yet";
};

}  // namespace ard::coordination
