// A running Job's lifecycle (job.h, job_state.h) without network: running -> failed (a member
// dying, another host, stall shutdown, daemon shutdown), running -> ended, and that a failed or
// ended job stays so. Real Sessions over socketpairs; a FakeNegotiator.
#include "daemon/jobs/job.h"

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "daemon/jobs/job_test_util.h"

namespace ard::jobs {
namespace {

using Code = absl::StatusCode;

TEST_CASE("A member dying fails a running job: NOTIFY, pending requests fail, one report") {
  JobHarness h(3);
  h.FormInOrder();
  TestClient& c0 = h.client(0);
  TestClient& c1 = h.client(1);
  TestClient& c2 = h.client(2);
  FakeNegotiator& n = h.negotiator();
  h.Submit(c0, 11, FloatSum("grad", 4));  // waits for ranks 1 and 2 in the readiness table
  h.Submit(c0, 21, Barrier("b"));
  h.Submit(c1, 22, Barrier("b"));
  h.Submit(c2, 23, Barrier("b"));
  REQUIRE(n.ready.size() == 1);  // host-ready, not committed yet

  c2.Exit();
  h.Close(c2, /*graceful=*/false, "exited (connection reset)");
  CHECK(h.state() == JobState::kFailed);
  REQUIRE(n.failures.size() == 1);
  const absl::Status failure = n.failures[0];
  CHECK(failure.code() == Code::kAborted);
  CHECK(absl::StrContains(failure.message(),
                          "rank 2 (pid 1002) on host h-test exited (connection reset)"));
  CHECK(n.uncommitted_taken == 1);
  // Each member hears the failure, then its pending (table) and uncommitted requests fail.
  CHECK(Expect(c0, wire::MsgType::kNotify, Code::kAborted) == failure.message());
  CHECK(Expect(c0, wire::MsgType::kComplete, Code::kAborted, 11) == failure.message());
  Expect(c0, wire::MsgType::kComplete, Code::kAborted, 21);
  Expect(c1, wire::MsgType::kNotify, Code::kAborted);
  Expect(c1, wire::MsgType::kComplete, Code::kAborted, 22);
  CHECK(c0.Quiet());
  CHECK(c1.Quiet());
  JobSummary s = h.Summary();
  CHECK(s.state() == "failed");
  CHECK(s.failure() == failure.message());
  CHECK(s.pending_tensors() == 0);
  CHECK(h.finished() == 0);  // ranks 0 and 1 are still attached

  h.Close(c0, /*graceful=*/true);
  h.Close(c1, /*graceful=*/false);
  CHECK(h.state() == JobState::kEnded);
  CHECK(h.Summary().failure() == failure.message());
  CHECK(h.finished() == 1);
  CHECK(n.failures.size() == 1);
  CHECK(n.left == 0);  // a failed job is not reported as left
}

TEST_CASE("A failure elsewhere fails the job here without reporting it back") {
  JobHarness h(2);
  h.FormInOrder();
  FakeNegotiator& n = h.negotiator();
  h.Submit(h.client(0), 3, FloatSum("grad", 4));
  h.OnLoop([&] { n.sink->OnFailedElsewhere(absl::UnavailableError("host h-b was lost")); });
  CHECK(h.state() == JobState::kFailed);
  CHECK(n.failures.empty());
  CHECK(Expect(h.client(0), wire::MsgType::kNotify, Code::kUnavailable) == "host h-b was lost");
  Expect(h.client(0), wire::MsgType::kComplete, Code::kUnavailable, 3);
  Expect(h.client(1), wire::MsgType::kNotify, Code::kUnavailable);
  CHECK(h.client(1).Quiet());
}

TEST_CASE("Stall inspection lists a waiting tensor, and stall shutdown fails the job") {
  JobOptions options = TestJobOptions();
  options.stall_warning = absl::Seconds(1);
  SECTION("warning only") {
    JobHarness h(2, false, options);
    h.FormInOrder();
    const absl::Time before = absl::Now();
    h.Submit(h.client(0), 3, FloatSum("slow", 4));
    h.OnLoop([&] { h.job().InspectStalls(absl::Now() + absl::Hours(1)); });
    CHECK(h.state() == JobState::kRunning);
    JobSummary s = h.Summary();
    REQUIRE(s.stalled_size() == 1);
    CHECK(s.stalled(0).name() == "slow");
    CHECK(std::vector<int>(s.stalled(0).submitted_ranks().begin(),
                           s.stalled(0).submitted_ranks().end()) == std::vector<int>{0});
    CHECK(std::vector<int>(s.stalled(0).missing_ranks().begin(),
                           s.stalled(0).missing_ranks().end()) == std::vector<int>{1});
    CHECK(h.client(0).Quiet());
    h.OnLoop([&] { h.job().InspectStalls(before); });  // nothing waited yet at that time
    CHECK(h.Summary().stalled_size() == 0);
  }
  SECTION("shutdown") {
    options.stall_shutdown = absl::Seconds(2);
    JobHarness h(2, false, options);
    h.FormInOrder();
    h.Submit(h.client(0), 3, FloatSum("slow", 4));
    h.OnLoop([&] { h.job().InspectStalls(absl::Now() + absl::Hours(1)); });
    CHECK(h.state() == JobState::kFailed);
    FakeNegotiator& n = h.negotiator();
    REQUIRE(n.failures.size() == 1);
    CHECK(absl::StrContains(n.failures[0].message(), "stall shutdown"));
    CHECK(absl::StrContains(n.failures[0].message(), "slow"));
    Expect(h.client(0), wire::MsgType::kNotify, Code::kAborted);
    Expect(h.client(0), wire::MsgType::kComplete, Code::kAborted, 3);
    Expect(h.client(1), wire::MsgType::kNotify, Code::kAborted);
  }
}

TEST_CASE("A job whose members all leave cleanly with nothing pending ends") {
  JobHarness h(2);
  h.FormInOrder();
  FakeNegotiator& n = h.negotiator();
  h.Close(h.client(0), /*graceful=*/true, "sent BYE");
  CHECK(h.state() == JobState::kRunning);
  CHECK(h.client(1).Quiet());
  CHECK(n.left == 0);
  int finished_at_end = -1;
  h.OnLoop([&] {
    h.client(1).session()->Close();
    h.job().OnMemberClosed(h.client(1).session(), /*graceful=*/true, "sent BYE");
    finished_at_end = h.finished_now();
  });
  CHECK(finished_at_end == 0);  // on_finished is posted, not run inside the close
  CHECK(h.finished() == 1);
  CHECK(h.state() == JobState::kEnded);
  CHECK(n.left == 1);
  CHECK(n.failures.empty());
  JobSummary s = h.Summary();
  CHECK(s.state() == "ended");
  CHECK(s.failure().empty());
  CHECK(s.generation() == 1);
}

TEST_CASE("A clean leave with nothing pending fails the job only at the next submit") {
  JobHarness h(2);
  h.FormInOrder();
  FakeNegotiator& n = h.negotiator();
  h.Close(h.client(1), /*graceful=*/true, "sent BYE");
  CHECK(h.state() == JobState::kRunning);
  CHECK(h.client(0).Quiet());
  CHECK(n.failures.empty());

  h.Submit(h.client(0), 5, FloatSum("grad", 4));
  CHECK(h.state() == JobState::kFailed);
  const std::string why = Expect(h.client(0), wire::MsgType::kNotify, Code::kAborted);
  CHECK(absl::StrContains(why, "rank 1 (pid 1001) on host h-test sent BYE"));
  CHECK(Expect(h.client(0), wire::MsgType::kComplete, Code::kAborted, 5) == why);
  REQUIRE(n.failures.size() == 1);
  CHECK(n.failures[0].message() == why);

  h.Close(h.client(0), /*graceful=*/true);
  CHECK(h.state() == JobState::kEnded);
  CHECK(n.left == 0);
  CHECK(h.finished() == 1);
}

TEST_CASE("A clean leave while a tensor waits for the leaving rank fails the job at once") {
  JobHarness h(2);
  h.FormInOrder();
  h.Submit(h.client(0), 5, FloatSum("grad", 4));
  h.Close(h.client(1), /*graceful=*/true, "sent BYE");
  CHECK(h.state() == JobState::kFailed);
  Expect(h.client(0), wire::MsgType::kNotify, Code::kAborted);
  Expect(h.client(0), wire::MsgType::kComplete, Code::kAborted, 5);
  CHECK(h.negotiator().failures.size() == 1);
}

// In a cross-host job with one rank on this host, the other hosts must learn of its crash at once
// (ReportFailure), not as a clean leave.
TEST_CASE("The last member exiting without BYE fails the job rather than leaving it") {
  JobHarness h(1);
  h.FormInOrder();
  h.Submit(h.client(0), 1, Barrier("b"));
  h.client(0).Exit();
  h.Close(h.client(0), /*graceful=*/false, "exited (connection reset)");
  FakeNegotiator& n = h.negotiator();
  CHECK(n.left == 0);
  REQUIRE(n.failures.size() == 1);
  CHECK(absl::StrContains(n.failures[0].message(), "rank 0 (pid 1000) on host h-test exited"));
  CHECK(h.Summary().failure() == n.failures[0].message());
  CHECK(h.state() == JobState::kEnded);
}

TEST_CASE("The first failure wins; later ones change nothing") {
  JobHarness h(2);
  h.FormInOrder();
  FakeNegotiator& n = h.negotiator();
  h.OnLoop([&] { h.job().Fail(absl::AbortedError("first")); });
  h.OnLoop([&] { h.job().Fail(absl::InternalError("second")); });
  h.OnLoop([&] { n.sink->OnFailedElsewhere(absl::UnavailableError("third")); });
  h.OnLoop([&] { h.job().Shutdown(); });
  CHECK(h.Summary().failure() == "first");
  REQUIRE(n.failures.size() == 1);
  CHECK(n.failures[0].message() == "first");
  for (int i = 0; i < 2; ++i) {
    CHECK(Expect(h.client(i), wire::MsgType::kNotify, Code::kAborted) == "first");
    CHECK(h.client(i).Quiet());
  }
}

TEST_CASE("Daemon shutdown fails a running job") {
  JobHarness h(2);
  h.FormInOrder();
  h.OnLoop([&] { h.job().Shutdown(); });
  CHECK(h.state() == JobState::kFailed);
  CHECK(Expect(h.client(0), wire::MsgType::kNotify, Code::kUnavailable) ==
        "allreduced is shutting down");
  REQUIRE(h.negotiator().failures.size() == 1);
}

TEST_CASE("Summary is pure") {
  JobOptions options = TestJobOptions();
  options.stall_warning = absl::Seconds(1);
  JobHarness h(2, false, options);
  FakeNegotiator& n = h.negotiator();
  auto check_pure = [&] {
    const absl::Time now = absl::Now();
    const JobState before = h.state();
    const size_t forms = n.forms.size();
    const size_t failures = n.failures.size();
    JobSummary first, second;
    h.OnLoop([&] {
      first = h.job().Summary(now);
      second = h.job().Summary(now);
    });
    CHECK(first.SerializeAsString() == second.SerializeAsString());
    CHECK(h.state() == before);
    CHECK(n.forms.size() == forms);
    CHECK(n.failures.size() == failures);
    CHECK(n.left == 0);
    for (int i = 0; i < 2; ++i) CHECK(h.client(i).Quiet());
    return first;
  };
  h.Add();
  h.Add();
  CHECK(check_pure().state() == "forming");
  h.OnLoop([&] { n.CompleteForm(0, OneHostFormation({0, 1}, "h-test")); });
  for (int i = 0; i < 2; ++i) REQUIRE(h.client(i).Next().type == wire::MsgType::kWelcome);
  h.Submit(h.client(0), 3, FloatSum("slow", 4));
  h.OnLoop([&] { h.job().InspectStalls(absl::Now() + absl::Hours(1)); });
  JobSummary running = check_pure();
  CHECK(running.state() == "running");
  CHECK(running.pending_tensors() == 1);
  CHECK(running.stalled_size() == 1);  // the last inspection's, kept (not redone) by Summary
  h.OnLoop([&] { h.job().Fail(absl::AbortedError("boom")); });
  for (int i = 0; i < 2; ++i) {
    while (!h.client(i).Quiet()) h.client(i).Next();
  }
  CHECK(check_pure().state() == "failed");
}

TEST_CASE("A failed job never runs again: late commits, joins and formations do nothing") {
  JobHarness h(2);
  h.FormInOrder();
  FakeNegotiator& n = h.negotiator();
  h.Submit(h.client(0), 1, Barrier("b"));
  h.Submit(h.client(1), 2, Barrier("b"));
  h.Submit(h.client(0), 3, Join());
  REQUIRE(n.ready.size() == 1);
  const negotiation::Response late = n.ready[0];  // the negotiator's copy, committed too late
  h.OnLoop([&] { h.job().Fail(absl::AbortedError("boom")); });
  for (int i = 0; i < 2; ++i) Expect(h.client(i), wire::MsgType::kNotify, Code::kAborted);
  Expect(h.client(0), wire::MsgType::kComplete, Code::kAborted, 3);  // the join (table)
  Expect(h.client(0), wire::MsgType::kComplete, Code::kAborted, 1);  // uncommitted
  Expect(h.client(1), wire::MsgType::kComplete, Code::kAborted, 2);

  h.OnLoop([&] { n.sink->OnCommitted(late); });
  h.OnLoop([&] { n.sink->OnJoinDone(absl::OkStatus(), 0); });
  h.OnLoop([&] { h.job().FormTimeout(); });
  CHECK(h.state() == JobState::kFailed);
  CHECK(h.Summary().collectives_completed() == 0);
  for (int i = 0; i < 2; ++i) CHECK(h.client(i).Quiet());

  h.Close(h.client(0), /*graceful=*/false);
  h.Close(h.client(1), /*graceful=*/false);
  CHECK(h.state() == JobState::kEnded);
  h.OnLoop([&] {
    n.sink->OnCommitted(late);
    n.sink->OnFailedElsewhere(absl::UnavailableError("later"));
    h.job().FormTimeout();
    h.job().InspectStalls(absl::Now() + absl::Hours(1));
  });
  CHECK(h.state() == JobState::kEnded);
  CHECK(h.Summary().failure() == "boom");
  CHECK(h.finished() == 1);
  CHECK(n.failures.size() == 1);
}

}  // namespace
}  // namespace ard::jobs
