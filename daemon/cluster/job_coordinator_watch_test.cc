// The coordinator when a host's WatchJob stream ends (OnWatchEnded): its job is aborted after the
// grace, naming the host, unless the host reported `left` or a failure; a refused second stream,
// another generation's and a stopping coordinator abort nothing. The loop runs here, so the grace
// timer fires; every check runs on the loop after a delay no shorter than the grace (timers run in
// due order), never after a sleep.
#include <functional>
#include <memory>

#include "absl/synchronization/notification.h"
#include "catch2/catch.hpp"
#include "daemon/cluster/job_coordinator.h"
#include "daemon/cluster/job_coordinator_test_util.h"

namespace ard::cluster {
namespace {

using testing::FakeSink;
using testing::Registration;

constexpr absl::Duration kGrace = absl::Milliseconds(20);
constexpr char kStopped[] =
    "host b stopped watching job train (its daemon exited or lost the coordinator)";

WatchJobRequest WatchOf(uint64_t job_id, const std::string& host) {
  WatchJobRequest w;
  w.set_job_id(job_id);
  w.set_host(host);
  w.set_generation(1);
  return w;
}

struct Fixture {
  Fixture() {
    JobCoordinatorOptions options;
    options.watch_end_grace = kGrace;
    coordinator = std::make_unique<JobCoordinator>(loop, options);
    loop.Start();
    absl::Status watched;
    OnLoop([&] {
      coordinator->HandleRegisterRanks(Registration("a", 2, 4), [](auto) {});
      coordinator->HandleRegisterRanks(Registration("b", 2, 4), [&](auto r) {
        if (r.ok()) job_id = r->layout().job_id();
      });
      watched.Update(coordinator->Watch(WatchOf(job_id, "a"), a));
      watched.Update(coordinator->Watch(WatchOf(job_id, "b"), b));
    });
    REQUIRE(job_id != 0);
    REQUIRE(watched.ok());
  }
  ~Fixture() { loop.Stop(); }  // before the coordinator goes: its timers capture it

  // Runs `task` on the loop once `delay` passed (after every timer due earlier) and waits.
  // Checks stay on the test thread (Catch2 asserts from one thread).
  void OnLoop(std::function<void()> task, absl::Duration delay = absl::ZeroDuration()) {
    absl::Notification done;
    loop.PostAfter(delay, [&] {
      task();
      done.Notify();
    });
    done.WaitForNotification();
  }

  // On the loop: `host`'s Negotiate call reporting it left, or a failure.
  void Send(const std::string& host, bool left, const std::string& failure = "") {
    NegotiateRequest request;
    request.set_job_id(job_id);
    request.set_generation(1);
    request.set_host(host);
    request.set_left(left);
    request.set_failure(failure);
    coordinator->HandleNegotiate(request, [this](auto r) { replies.Update(r.status()); });
  }

  // The state and failure of the job in status.
  std::pair<std::string, std::string> Status() {
    std::vector<JobSummary> jobs;
    OnLoop([&] { jobs = coordinator->Summaries(); });
    REQUIRE(jobs.size() == 1);
    return {jobs[0].state(), jobs[0].failure()};
  }

  EventLoop loop{"test"};
  std::unique_ptr<JobCoordinator> coordinator;
  std::shared_ptr<FakeSink> a = std::make_shared<FakeSink>();
  std::shared_ptr<FakeSink> b = std::make_shared<FakeSink>();
  uint64_t job_id = 0;
  absl::Status replies;  // the first error among Send's replies
};

TEST_CASE("a host whose event stream ends without leaving aborts its job after the grace") {
  Fixture f;
  f.OnLoop([&] { f.coordinator->OnWatchEnded(WatchOf(f.job_id, "b"), f.b); });
  CHECK(f.a->events().empty());  // not before the grace: a `left` may still come
  CHECK(f.Status().first == "running");
  f.OnLoop([] {}, kGrace);
  const std::vector<JobEvent> events = f.a->events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].abort() == kStopped);
  CHECK(events[0].abort_code() == static_cast<int>(absl::StatusCode::kUnavailable));
  CHECK(f.a->finished());
  CHECK(f.Status() == std::make_pair(std::string("failed"), std::string(kStopped)));
}

TEST_CASE("a host that reports left around its stream's end does not abort the job") {
  Fixture f;
  SECTION("left after the stream ended, within the grace") {
    f.OnLoop([&] {
      f.coordinator->OnWatchEnded(WatchOf(f.job_id, "b"), f.b);
      f.Send("b", true);
    });
  }
  SECTION("left before the stream ended") {
    f.OnLoop([&] {
      f.Send("b", true);
      f.coordinator->OnWatchEnded(WatchOf(f.job_id, "b"), f.b);
    });
  }
  f.OnLoop([] {}, kGrace);
  CHECK(f.a->events().empty());
  CHECK(f.Status().first == "running");  // a's ranks still run
  f.OnLoop([&] {
    f.coordinator->OnWatchEnded(WatchOf(f.job_id, "a"), f.a);
    f.Send("a", true);
  });
  f.OnLoop([] {}, kGrace);
  CHECK(f.a->events().empty());
  CHECK(f.Status() == std::make_pair(std::string("ended"), std::string()));
  CHECK(f.replies.ok());
}

TEST_CASE("a failure reported within the grace is the job's reason, not the stream's end") {
  Fixture f;
  f.OnLoop([&] {
    f.coordinator->OnWatchEnded(WatchOf(f.job_id, "b"), f.b);
    f.Send("b", false, "rank 3 (pid 7) on host b exited");
  });
  f.OnLoop([] {}, kGrace);
  REQUIRE(f.a->events().size() == 1);
  CHECK(f.a->events()[0].abort() == "rank 3 (pid 7) on host b exited");
  CHECK(f.Status().second == "rank 3 (pid 7) on host b exited");
}

TEST_CASE("a refused second stream, another generation or a stopping coordinator abort nothing") {
  Fixture f;
  auto second = std::make_shared<FakeSink>();
  absl::Status refused;
  f.OnLoop([&] {
    refused = f.coordinator->Watch(WatchOf(f.job_id, "b"), second);
    f.coordinator->OnWatchEnded(WatchOf(f.job_id, "b"), second);
    WatchJobRequest stale = WatchOf(f.job_id, "b");
    stale.set_generation(2);
    f.coordinator->OnWatchEnded(stale, f.b);
  });
  CHECK(refused.code() == absl::StatusCode::kAlreadyExists);
  f.OnLoop([] {}, kGrace);
  CHECK(f.a->events().empty());
  SECTION("stopping before the stream ends") {
    f.OnLoop([&] {
      f.coordinator->Stop();
      f.coordinator->OnWatchEnded(WatchOf(f.job_id, "b"), f.b);
    });
  }
  SECTION("stopping within the grace") {
    f.OnLoop([&] {
      f.coordinator->OnWatchEnded(WatchOf(f.job_id, "b"), f.b);
      f.coordinator->Stop();
    });
  }
  f.OnLoop([] {}, kGrace);
  CHECK(f.a->events().empty());
  CHECK(f.Status().first == "running");
}

}  // namespace
}  // namespace ard::cluster
