// The Job's lifecycle (job.h, job_state.h) without network: forming -> running, forming ->
// failed (formation timeout, a failed formation), members leaving while it forms, running ->
// failed (a member dying, another host, stall shutdown, daemon shutdown), running -> ended, and
// that a failed or ended job stays so. Real Sessions over socketpairs; a FakeNegotiator.
#include "daemon/jobs/job.h"

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "daemon/jobs/job_test_util.h"

namespace ard::jobs {
namespace {

using Code = absl::StatusCode;

int32_t Wire(Code code) { return static_cast<int32_t>(code); }

// The next frame is `type` with status `code`; returns its message.
std::string Expect(TestClient& c, wire::MsgType type, Code code, uint64_t request_id = 0) {
  ClientFrame f = c.Next();
  REQUIRE(f.type == type);
  CHECK(f.code == Wire(code));
  CHECK(f.request_id == request_id);
  return f.message;
}

TEST_CASE("A job forms once every local rank registered, and each member gets its WELCOME") {
  JobHarness h(3);
  TestClient& a = h.Add();
  TestClient& b = h.Add(/*rank=*/2);
  FakeNegotiator& n = h.negotiator();
  CHECK(n.forms.empty());  // 2 of 3 registered
  JobSummary forming = h.Summary();
  CHECK(forming.state() == "forming");
  CHECK(forming.generation() == 0);
  CHECK(forming.registered_ranks() == 2);

  TestClient& c = h.Add(-1, /*local_rank=*/0);
  REQUIRE(n.forms.size() == 1);
  const std::vector<MemberInfo>& infos = n.forms[0];
  REQUIRE(infos.size() == 3);
  CHECK((infos[0].rank == -1 && infos[0].pid == static_cast<uint32_t>(a.pid())));
  CHECK((infos[1].rank == 2 && infos[1].pid == static_cast<uint32_t>(b.pid())));
  CHECK((infos[2].local_rank == 0 && infos[2].pid == static_cast<uint32_t>(c.pid())));
  CHECK(h.state() == JobState::kForming);  // until the negotiator answers
  CHECK(a.Quiet());

  // The negotiator numbers them a -> 1, b -> 2, c -> 0.
  h.OnLoop([&] { n.CompleteForm(0, OneHostFormation({1, 2, 0}, "h-test")); });
  CHECK(h.state() == JobState::kRunning);
  CHECK(n.starts == 1);
  CHECK(n.sink != nullptr);
  const std::vector<std::pair<TestClient*, int>> expected = {{&a, 1}, {&b, 2}, {&c, 0}};
  for (const auto& [client, rank] : expected) {
    ClientFrame w = client->Next();
    REQUIRE(w.type == wire::MsgType::kWelcome);
    CHECK(w.had_fd);  // result segment 0
    CHECK(w.welcome.rank == rank);
    CHECK(w.welcome.size == 3);
    CHECK(w.welcome.local_rank == rank);
    CHECK(w.welcome.local_size == 3);
    CHECK(w.welcome.cross_rank == 0);
    CHECK(w.welcome.cross_size == 1);
    CHECK(w.welcome.job_id == JobHarness::kJobId);
    CHECK(w.welcome.result_segment_bytes == h.options().result_segment_bytes);
    CHECK(w.welcome.max_tensor_bytes == wire::kMaxTensorBytes);
    CHECK(client->Quiet());
  }
  h.OnLoop([&] {
    CHECK((a.session()->welcomed && a.session()->rank == 1 && a.session()->local_rank == 1));
    CHECK((c.session()->welcomed && c.session()->rank == 0));
  });
  JobSummary running = h.Summary();
  CHECK(running.state() == "running");
  CHECK(running.generation() == 1);
  CHECK(running.failure().empty());
  REQUIRE(running.ranks_size() == 1);
  CHECK(running.ranks(0).host() == "h-test");
  CHECK(std::vector<int>(running.ranks(0).ranks().begin(), running.ranks(0).ranks().end()) ==
        std::vector<int>{0, 1, 2});
  CHECK(std::vector<uint32_t>(running.ranks(0).pids().begin(), running.ranks(0).pids().end()) ==
        std::vector<uint32_t>{1002, 1000, 1001});
  CHECK(h.finished() == 0);
  CHECK(n.failures.empty());
}

TEST_CASE("A job that does not form in time tells each member DEADLINE_EXCEEDED and ends") {
  JobHarness h(2);
  TestClient& a = h.Add(/*rank=*/1);
  h.OnLoop([&] { h.job().FormTimeout(); });
  const std::string why = Expect(a, wire::MsgType::kError, Code::kDeadlineExceeded);
  CHECK(absl::StrContains(why, "job job-a did not form within 5s"));
  CHECK(absl::StrContains(why, "1 of 2 ranks registered (ranks 1)"));
  CHECK(h.state() == JobState::kEnded);
  CHECK(h.finished() == 1);
  h.OnLoop([&] {
    CHECK(a.session()->job.empty());  // free to register again
    CHECK(a.session()->rank == -1);
  });
  JobSummary s = h.Summary();
  CHECK(s.state() == "ended");
  CHECK(s.failure() == why);
  CHECK(s.registered_ranks() == 0);
  CHECK(s.generation() == 0);
  FakeNegotiator& n = h.negotiator();
  CHECK(n.forms.empty());
  CHECK(n.left == 0);

  h.OnLoop([&] { h.job().FormTimeout(); });  // a second timer: nothing more
  CHECK(a.Quiet());
  CHECK(h.finished() == 1);
}

TEST_CASE("A formation that completes after the formation timeout is reported as failed") {
  JobHarness h(2);
  TestClient& a = h.Add();
  TestClient& b = h.Add();
  FakeNegotiator& n = h.negotiator();
  REQUIRE(n.forms.size() == 1);
  h.OnLoop([&] { h.job().FormTimeout(); });
  Expect(a, wire::MsgType::kError, Code::kDeadlineExceeded);
  Expect(b, wire::MsgType::kError, Code::kDeadlineExceeded);
  CHECK(h.finished() == 1);

  h.OnLoop([&] { n.CompleteForm(0, OneHostFormation({0, 1}, "h-test")); });
  CHECK(h.state() == JobState::kEnded);  // never runs
  CHECK(n.starts == 0);
  REQUIRE(n.failures.size() == 1);  // the other hosts must not wait for this one
  CHECK(n.failures[0].code() == Code::kAborted);
  CHECK(a.Quiet());
  CHECK(b.Quiet());
  CHECK(h.Summary().generation() == 0);
  CHECK(h.finished() == 1);
}

TEST_CASE("A failed formation is each member's error, and the job ends") {
  JobHarness h(2);
  TestClient& a = h.Add();
  TestClient& b = h.Add();
  FakeNegotiator& n = h.negotiator();
  h.OnLoop([&] { n.CompleteForm(0, absl::UnavailableError("coordinator unreachable")); });
  CHECK(Expect(a, wire::MsgType::kError, Code::kUnavailable) == "coordinator unreachable");
  CHECK(Expect(b, wire::MsgType::kError, Code::kUnavailable) == "coordinator unreachable");
  CHECK(h.state() == JobState::kEnded);
  CHECK(h.Summary().failure() == "coordinator unreachable");
  CHECK(h.finished() == 1);
  CHECK(n.starts == 0);
  CHECK(n.left == 0);
  h.OnLoop([&] {
    CHECK(a.session()->job.empty());
    CHECK(b.session()->job.empty());
  });
}

TEST_CASE("A member that leaves while the job forms is removed from it") {
  SECTION("before every rank registered: FormAsync gets the members still here") {
    JobHarness h(3);
    TestClient& a = h.Add();
    h.Add();
    h.Close(a, /*graceful=*/false, "exited");
    CHECK(h.Summary().registered_ranks() == 1);
    CHECK(h.state() == JobState::kForming);
    h.Add();
    CHECK(h.negotiator().forms.empty());  // 2 of 3 again
    h.Add();
    FakeNegotiator& n = h.negotiator();
    REQUIRE(n.forms.size() == 1);
    REQUIRE(n.forms[0].size() == 3);
    CHECK(n.forms[0][0].pid == 1001);
    CHECK(n.forms[0][2].pid == 1003);
    CHECK(h.finished() == 0);
  }
  SECTION("while the negotiator forms it: the job fails, and the late formation is reported") {
    JobHarness h(2);
    TestClient& a = h.Add();
    TestClient& b = h.Add();
    FakeNegotiator& n = h.negotiator();
    REQUIRE(n.forms.size() == 1);
    b.Exit();
    h.Close(b, /*graceful=*/false, "exited");
    // The other hosts are being formed into a job with b in it: a hears at once why it cannot run.
    const std::string why = Expect(a, wire::MsgType::kError, Code::kAborted);
    CHECK(absl::StrContains(why, "exited while job"));
    CHECK(h.state() == JobState::kEnded);
    CHECK(h.finished() == 1);
    CHECK(n.failures.empty());
    h.OnLoop([&] { n.CompleteForm(0, OneHostFormation({0, 1}, "h-test")); });
    REQUIRE(n.failures.size() == 1);  // the formed job's other hosts must not wait for this one
    CHECK(n.failures[0].code() == Code::kAborted);
    CHECK(n.failures[0].message() == why);
    CHECK(n.starts == 0);
    CHECK(a.Quiet());  // no WELCOME
    CHECK(h.state() == JobState::kEnded);
  }
}

TEST_CASE("A forming job whose members all left ends without a failure") {
  JobHarness h(3);
  TestClient& a = h.Add();
  TestClient& b = h.Add();
  h.Close(a, /*graceful=*/true);
  CHECK(h.finished() == 0);
  h.Close(b, /*graceful=*/false);
  CHECK(h.state() == JobState::kEnded);
  CHECK(h.finished() == 1);
  CHECK(h.Summary().failure().empty());
  FakeNegotiator& n = h.negotiator();
  CHECK(n.left == 0);  // it never ran
  CHECK(n.failures.empty());
}

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

TEST_CASE("CheckHello admits only matching processes to a forming job") {
  JobHarness h(2);
  h.Add(/*rank=*/0, /*local_rank=*/0);
  wire::Hello hello{};
  hello.rank = 1;
  hello.local_rank = 1;
  hello.size = 2;
  hello.local_size = 2;
  h.OnLoop([&] {
    CHECK(h.job().CheckHello(hello, 2).ok());
    CHECK(h.job().CheckHello(hello, 3).code() == Code::kInvalidArgument);  // size differs
    wire::Hello twice = hello;
    twice.rank = 0;
    CHECK(h.job().CheckHello(twice, 2).code() == Code::kInvalidArgument);
    wire::Hello cross = hello;
    cross.local_size = 1;  // says the job spans hosts
    CHECK(h.job().CheckHello(cross, 2).code() == Code::kInvalidArgument);
  });
  h.Add(1, 1);
  h.OnLoop([&] { h.negotiator().CompleteForm(0, OneHostFormation({0, 1}, "h-test")); });
  h.OnLoop([&] { CHECK(h.job().CheckHello(hello, 2).code() == Code::kAlreadyExists); });
}

}  // namespace
}  // namespace ard::jobs
