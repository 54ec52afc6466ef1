// TermNegotiation on a real event loop with scripted coordinators: a RegisterRanks that meets no
// coordinator, or one answering as during a failover, is retried until a coordinator takes it or
// its timeout passes; a real refusal is passed on at once.
#include "daemon/coordination/term_negotiation.h"

#include <deque>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "catch2/catch.hpp"

namespace ard::coordination {
namespace {

// Answers RegisterRanks from a script (the last answer repeats) and counts the calls.
class ScriptedCoordinator : public cluster::NegotiationClient {
 public:
  explicit ScriptedCoordinator(std::deque<absl::Status> script) : script_(std::move(script)) {}
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  std::vector<std::string> jobs() {
    absl::MutexLock lock(&mu_);
    return jobs_;
  }
  void RegisterRanksAsync(const RegisterRanksRequest& request, absl::Duration,
                          cluster::Done<RegisterRanksResponse> done) override {
    absl::Status answer;
    {
      absl::MutexLock lock(&mu_);
      ++calls_;
      jobs_.push_back(request.job());
      answer = script_.front();
      if (script_.size() > 1) script_.pop_front();
    }
    if (!answer.ok()) return done(answer);
    done(RegisterRanksResponse());
  }
  void NegotiateAsync(const NegotiateRequest&, cluster::Done<NegotiateResponse> done) override {
    done(NegotiateResponse());
  }
  std::shared_ptr<cluster::JobWatch> WatchJob(const WatchJobRequest&,
                                              std::function<void(const JobEvent&)>,
                                              std::function<void(absl::Status)>) override {
    return nullptr;
  }

 private:
  absl::Mutex mu_;
  std::deque<absl::Status> script_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> jobs_ ABSL_GUARDED_BY(mu_);
};

absl::Status Register(EventLoop& loop, TermNegotiation& client, absl::Duration timeout) {
  absl::Notification answered;
  absl::Status status;
  RegisterRanksRequest request;
  request.set_job("j");
  client.RegisterRanksAsync(request, timeout, [&](absl::StatusOr<RegisterRanksResponse> r) {
    status = r.status();
    answered.Notify();
  });
  answered.WaitForNotification();
  return status;
}

void OnLoop(EventLoop& loop, std::function<void()> task) {
  absl::Notification ran;
  loop.Post([&] {
    task();
    ran.Notify();
  });
  ran.WaitForNotification();
}

TEST_CASE("a registration waits out a failover and reaches the coordinator that answers") {
  EventLoop loop("test-loop");
  loop.Start();
  TermNegotiation client(loop, absl::Milliseconds(5));
  ScriptedCoordinator coordinator({absl::UnavailableError("connection refused"),
                                   absl::PermissionDeniedError("not an UP member of the cluster"),
                                   absl::OkStatus()});
  OnLoop(loop, [&] { client.SetTargetOnLoop(&coordinator, ""); });
  CHECK(Register(loop, client, absl::Seconds(30)).ok());
  CHECK(coordinator.calls() == 3);
  CHECK(coordinator.jobs() == std::vector<std::string>{"j", "j", "j"});
  loop.Stop();
}

TEST_CASE("with no coordinator a registration fails at its timeout, saying why") {
  EventLoop loop("test-loop");
  loop.Start();
  TermNegotiation client(loop, absl::Milliseconds(5));
  OnLoop(loop, [&] { client.SetTargetOnLoop(nullptr, "no coordinator: etcd unreachable"); });
  absl::Status status = Register(loop, client, absl::Milliseconds(50));
  CHECK(absl::IsDeadlineExceeded(status));
  CHECK(status.message().find("no coordinator: etcd unreachable") != absl::string_view::npos);
  loop.Stop();
}

TEST_CASE("a gate holds registrations back; a real refusal is passed on at once") {
  EventLoop loop("test-loop");
  loop.Start();
  TermNegotiation client(loop, absl::Milliseconds(5));
  ScriptedCoordinator coordinator({absl::InvalidArgumentError("job j has size 4, not 2")});
  client.SetFormGate([] { return absl::UnavailableError("coordinator h is fenced"); });
  OnLoop(loop, [&] { client.SetTargetOnLoop(&coordinator, ""); });
  absl::Status gated = Register(loop, client, absl::Milliseconds(50));
  CHECK(absl::IsDeadlineExceeded(gated));
  CHECK(gated.message().find("fenced") != absl::string_view::npos);
  CHECK(coordinator.calls() == 0);
  client.SetFormGate(nullptr);
  CHECK(absl::IsInvalidArgument(Register(loop, client, absl::Seconds(30))));
  CHECK(coordinator.calls() == 1);
  loop.Stop();
}

}  // namespace
}  // namespace ard::coordination
