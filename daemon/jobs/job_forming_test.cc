// A Job while it forms (job.h, job_state.h) without network: forming -> running, forming ->
// failed (formation timeout, a failed formation, a member leaving while the formation is in
// flight), members leaving while it forms, who may join a forming job, and an elastic job formed
// by the coordinator (its generation, the joining-hosts notice). Real Sessions over socketpairs;
// a FakeNegotiator.
#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "daemon/jobs/job.h"
#include "daemon/jobs/job_test_util.h"

namespace ard::jobs {
namespace {

using Code = absl::StatusCode;

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
    CHECK(n.forms.size() == 1);  // never formed again for another member list
    CHECK(a.Quiet());            // no WELCOME
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

TEST_CASE("An elastic job the coordinator formed runs its generation and hears of joining hosts") {
  JobHarness h(2);
  // A host new to the job: its first generation here is the coordinator's generation 4.
  h.OnLoop([&] {
    h.job().MakeElastic({/*min_np=*/2, /*max_np=*/0, /*coordinated=*/true, 2}, 0, nullptr);
  });
  TestClient& a = h.Add(/*rank=*/2);
  TestClient& b = h.Add(/*rank=*/3);
  h.OnLoop([&] {
    h.job().MaybeFormElastic(
        Predecessors{false, absl::InfinitePast(), {}, absl::Milliseconds(500)});
  });
  FakeNegotiator& n = h.negotiator();
  REQUIRE(n.forms.size() == 1);
  Formation formed = OneHostFormation({0, 1}, "h-test");
  formed.generation = 4;
  h.OnLoop([&] { n.CompleteForm(0, formed); });
  CHECK(h.state() == JobState::kRunning);
  CHECK(h.Summary().generation() == 4);
  for (TestClient* c : {&a, &b}) REQUIRE(c->Next().type == wire::MsgType::kWelcome);
  // The coordinator says ranks of another host wait to join: every member is told, once.
  h.OnLoop([&] {
    n.sink->OnHostsUpdated();
    n.sink->OnHostsUpdated();
  });
  for (TestClient* c : {&a, &b}) {
    CHECK(Expect(*c, wire::MsgType::kNotify, Code::kOk) == wire::kHostsUpdated);
    CHECK(c->Quiet());
  }
  // They leave to re-register: the registry expects them back in the next generation.
  h.Close(a, /*graceful=*/true);
  h.OnLoop([&] {
    CHECK(h.job().reform_pending());
    CHECK(h.job().ReturningPids() ==
          std::set<uint32_t>{static_cast<uint32_t>(a.pid()), static_cast<uint32_t>(b.pid())});
  });
}

TEST_CASE("An elastic generation takes at most max_np members; the ones after them are refused") {
  JobHarness h(0, /*local_negotiator=*/true, TestJobOptions(), /*elastic_max_np=*/2);
  h.OnLoop([&] { h.job().MakeElastic({/*min_np=*/1, /*max_np=*/2, false, 0}, 1, nullptr); });
  // Three processes registered while the last generation's were still attached; their places in
  // rank order: 1, none, 0. The two first in that order form generation 2; b is left out.
  TestClient& a = h.Add(/*rank=*/1);
  TestClient& b = h.Add();
  TestClient& c = h.Add(/*rank=*/0);
  h.OnLoop([&] {
    h.job().MaybeFormElastic(
        Predecessors{false, absl::InfinitePast(), {}, absl::Milliseconds(500)});
  });
  REQUIRE(h.state() == JobState::kRunning);
  const std::vector<std::pair<TestClient*, int>> welcomed = {{&c, 0}, {&a, 1}};
  for (const auto& [client, rank] : welcomed) {
    ClientFrame w = client->Next();
    REQUIRE(w.type == wire::MsgType::kWelcome);
    CHECK(w.welcome.rank == rank);
    CHECK(w.welcome.size == 2);
  }
  const std::string refused = Expect(b, wire::MsgType::kError, Code::kResourceExhausted);
  CHECK(absl::StrContains(refused,
                          "elastic job job-a generation 2 formed with 2 ranks, its max_np "
                          "2: process 1001 on host h-test comes after them in rank order"));
  h.OnLoop([&] {
    CHECK(b.session()->job.empty());  // no member: its leaving is nothing to the job
    CHECK(h.job().Summary(absl::Now()).size() == 2u);
    // While the generation runs at max_np, a process that registers is refused at once.
    const absl::Status full = h.job().CheckRoom(1003);
    CHECK(full.code() == Code::kResourceExhausted);
    CHECK(full.message() ==
          "elastic job job-a runs 2 ranks, its max_np: process 1003 on host h-test cannot join "
          "it; start it again once a rank has left");
    CHECK(h.job().CheckRoom(a.pid()).ok());  // one of its ranks, registering again
  });
  CHECK(a.Quiet());
  CHECK(c.Quiet());
}

TEST_CASE("A process that registers while the coordinator forms its generation amends it") {
  JobHarness h(2);
  std::vector<std::shared_ptr<local::Session>> rejoined;
  h.OnLoop([&] {
    h.job().MakeElastic({/*min_np=*/2, /*max_np=*/0, /*coordinated=*/true, 0}, 1,
                        [&](auto late) { rejoined = std::move(late); });
  });
  const Predecessors settled{false, absl::InfinitePast(), {}, absl::ZeroDuration()};
  TestClient& a = h.Add(/*rank=*/0);
  h.OnLoop([&] { h.job().MaybeFormElastic(settled); });
  FakeNegotiator& n = h.negotiator();
  REQUIRE(n.forms.size() == 1);  // a alone: below min_np 2, the coordinator holds it
  TestClient& b = h.Add(/*rank=*/1);
  h.OnLoop([&] {
    CHECK(h.job().formation_in_flight());
    h.job().MaybeFormElastic(settled);  // b joined: the registration is amended
    h.job().MaybeFormElastic(settled);  // nothing new: nothing sent
  });
  REQUIRE(n.forms.size() == 2);
  CHECK(n.forms[1].size() == 2);
  SECTION("the amendment forms the generation with both") {
    h.OnLoop([&] { n.CompleteForm(1, OneHostFormation({0, 1}, "h-test")); });
    CHECK(h.state() == JobState::kRunning);
    for (TestClient* c : {&a, &b}) REQUIRE(c->Next().type == wire::MsgType::kWelcome);
    CHECK(rejoined.empty());
  }
  SECTION("it came too late: the generation forms from the first, b goes to the next one") {
    Formation first = OneHostFormation({0}, "h-test");
    h.OnLoop([&] { n.CompleteForm(1, first); });
    CHECK(h.state() == JobState::kRunning);
    CHECK(a.Next().type == wire::MsgType::kWelcome);
    REQUIRE(rejoined.size() == 1);
    CHECK(rejoined[0] == b.session());
    CHECK(b.Quiet());  // not refused: the registry makes it a member of the next generation
    h.OnLoop([&] { CHECK(h.job().Summary(absl::Now()).size() == 1u); });
  }
}

}  // namespace
}  // namespace ard::jobs
