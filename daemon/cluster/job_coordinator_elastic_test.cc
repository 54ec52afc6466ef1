// The coordinator's part of an elastic job growing onto a new host: a host outside the running
// generation registers ranks; the running hosts hear it once (JobEvent.hosts_updated), the new
// host's registration is held past every settle time while that generation runs (it would
// otherwise form a second job of the same name), and the next generation forms with it once the
// running ranks left and re-registered. A generation at max_np refuses a new host. Status shows
// the job's bounds and changes on its newest entry, a lost generation with what was lost. The loop
// runs here, so the settle timers fire; every check runs on the loop after a delay no shorter than
// the timers it must follow (timers run in due order), never after a sleep.
#include <functional>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "catch2/catch.hpp"
#include "daemon/cluster/job_coordinator.h"
#include "daemon/cluster/job_coordinator_test_util.h"
#include "daemon/negotiation/elastic_settle.h"

namespace ard::cluster {
namespace {

using testing::FakeSink;
using testing::Registration;

// Longer than every settle time of a formation (four times kElasticSettle, plus its 1 ms).
const absl::Duration kSettled = 4 * negotiation::kElasticSettle + absl::Milliseconds(20);

// Elastic (min_np 2, `max_np`) ranks of job "train" on `host`, their places in rank order `hints`.
RegisterRanksRequest Elastic(const std::string& host, std::vector<int> hints, int max_np) {
  RegisterRanksRequest r = Registration(host, static_cast<int>(hints.size()), max_np);
  r.set_elastic_min_np(2);
  for (size_t i = 0; i < hints.size(); ++i) r.mutable_ranks(i)->set_rank(hints[i]);
  return r;
}

std::vector<int> RanksOf(const JobLayout& layout, int host) {
  return std::vector<int>(layout.hosts(host).ranks().begin(), layout.hosts(host).ranks().end());
}

int HostsUpdatedEvents(FakeSink& sink) {
  int n = 0;
  for (const JobEvent& e : sink.events()) n += e.hosts_updated();
  return n;
}

struct Fixture {
  Fixture() { loop.Start(); }
  ~Fixture() { loop.Stop(); }  // before the coordinator goes: its timers capture it

  // Runs `task` on the loop once `delay` passed (after every timer due earlier) and waits.
  void OnLoop(std::function<void()> task, absl::Duration delay = absl::ZeroDuration()) {
    absl::Notification done;
    loop.PostAfter(delay, [&] {
      task();
      done.Notify();
    });
    done.WaitForNotification();
  }

  // On the loop: registers `request`; its answer lands in answers[host].
  void Register(const RegisterRanksRequest& request) {
    answers[request.host()] = absl::UnknownError("unanswered");
    coordinator.HandleRegisterRanks(request,
                                    [this, host = request.host()](auto r) { answers[host] = r; });
  }
  // The answers so far (read on the loop, which writes them).
  std::map<std::string, absl::StatusOr<RegisterRanksResponse>> Answers() {
    std::map<std::string, absl::StatusOr<RegisterRanksResponse>> out;
    OnLoop([&] { out = answers; });
    return out;
  }
  bool answered(const std::string& host) {
    return Answers().at(host).status().code() != absl::StatusCode::kUnknown;
  }

  // Generation 1 of job "train" on host "a" alone (a new job forms after it settled); a watches.
  uint64_t FormOnA(int max_np) {
    OnLoop([&] { Register(Elastic("a", {0, 1}, max_np)); });
    uint64_t id = 0;
    absl::Status watched = absl::UnknownError("not formed");
    OnLoop(
        [&] {
          if (!answers.at("a").ok()) return;
          id = answers.at("a")->layout().job_id();
          WatchJobRequest w;
          w.set_job_id(id);
          w.set_host("a");
          w.set_generation(1);
          watched = coordinator.Watch(w, a);
        },
        kSettled);
    REQUIRE(watched.ok());
    return id;
  }

  EventLoop loop{"test"};
  JobCoordinator coordinator{loop, JobCoordinatorOptions{}};
  std::shared_ptr<FakeSink> a = std::make_shared<FakeSink>();
  std::map<std::string, absl::StatusOr<RegisterRanksResponse>> answers;
};

TEST_CASE("a new host is announced to the running generation and joins the next one") {
  Fixture f;
  const uint64_t id = f.FormOnA(8);
  f.OnLoop([&] { f.Register(Elastic("c", {2, 3}, 8)); });
  CHECK(HostsUpdatedEvents(*f.a) == 1);
  // Held while a's generation runs, however long: alone it would have formed after settling.
  f.OnLoop([&] { f.Register(Elastic("d", {-1}, 8)); }, kSettled);
  f.OnLoop([] {}, kSettled);
  CHECK_FALSE(f.answered("c"));
  CHECK_FALSE(f.answered("d"));
  CHECK(HostsUpdatedEvents(*f.a) == 1);  // told once
  // a's ranks leave generation 1 (HostsUpdatedInterrupt) and register again: generation 2 forms
  // with every host, a's ranks first (their old places), then c's, then d's.
  f.OnLoop([&] {
    NegotiateRequest left;
    left.set_job_id(id);
    left.set_generation(1);
    left.set_host("a");
    left.set_left(true);
    f.coordinator.HandleNegotiate(left, [](auto) {});
  });
  CHECK_FALSE(f.answered("c"));  // a is expected back
  f.OnLoop([&] { f.Register(Elastic("a", {1, 0}, 8)); });
  const auto answers = f.Answers();
  for (const char* host : {"a", "c", "d"}) REQUIRE(answers.at(host).ok());
  const JobLayout& two = answers.at("c")->layout();
  CHECK(two.SerializeAsString() == answers.at("a")->layout().SerializeAsString());
  CHECK(two.SerializeAsString() == answers.at("d")->layout().SerializeAsString());
  CHECK(two.generation() == 2);
  CHECK(two.size() == 5);
  REQUIRE(two.hosts_size() == 3);
  CHECK(RanksOf(two, 0) == std::vector<int>{1, 0});
  CHECK(RanksOf(two, 1) == std::vector<int>{2, 3});
  CHECK(RanksOf(two, 2) == std::vector<int>{4});
  CHECK(two.job_id() != id);
  // Status: the running generation 2 carries the job's bounds and its changes.
  std::vector<JobSummary> jobs;
  f.OnLoop([&] { jobs = f.coordinator.Summaries(); });
  REQUIRE(jobs.size() == 2);  // generation 2 running, then generation 1 ended
  CHECK(jobs[1].elastic_changes().empty());
  const JobSummary& running = jobs[0];
  CHECK(running.generation() == 2);
  CHECK(running.elastic_min_np() == 2);
  CHECK(running.elastic_max_np() == 8);
  std::vector<std::string> changes;
  for (const auto& c : running.elastic_changes()) {
    changes.push_back(absl::StrCat(c.generation(), " ", c.change(), " ", c.size(), " [",
                                   absl::StrJoin(c.hosts(), ","), "] ", c.detail()));
  }
  CHECK(changes == std::vector<std::string>{
                       "1 formed 2 [a] ", "1 hosts updated 2 [c] ", "1 hosts updated 1 [d] ",
                       "1 ended 0 [] every host left", "2 grown 5 [a,c,d] +c +d"});
}

TEST_CASE("a running generation at max_np refuses a new host; its own hosts re-form as before") {
  Fixture f;
  // max_np 2: a's two ranks form generation 1 at once.
  f.OnLoop([&] { f.Register(Elastic("a", {0, 1}, 2)); });
  REQUIRE(f.Answers().at("a").ok());
  f.OnLoop([&] { f.Register(Elastic("c", {2}, 2)); });
  const absl::Status refused = f.Answers().at("c").status();
  CHECK(refused.code() == absl::StatusCode::kResourceExhausted);
  CHECK(refused.message() ==
        "elastic job train runs 2 ranks, its max_np: the 1 rank(s) of host c cannot join it");
  // A host of the running generation registering again is no news to it.
  f.OnLoop([&] { f.Register(Elastic("a", {0, 1}, 2)); });
  const auto again = f.Answers().at("a");
  REQUIRE(again.ok());
  CHECK(again->layout().generation() == 2);
}

TEST_CASE("a generation that lost a member is recorded with what was lost") {
  Fixture f;
  f.OnLoop([&] { f.Register(Elastic("a", {0, 1}, 2)); });
  const auto formed = f.Answers().at("a");
  REQUIRE(formed.ok());
  std::vector<JobSummary> jobs;
  f.OnLoop([&] {
    NegotiateRequest failed;
    failed.set_job_id(formed->layout().job_id());
    failed.set_generation(1);
    failed.set_host("a");
    failed.set_failure("elastic job train generation 1 re-forms: rank 1 (pid 7) on host a exited");
    failed.set_lost("rank 1 (pid 7) on host a exited");  // the cause, apart from the message
    f.coordinator.HandleNegotiate(failed, [](auto) {});
    jobs = f.coordinator.Summaries();
  });
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].state() == "failed");
  REQUIRE(jobs[0].elastic_changes_size() == 2);
  CHECK(jobs[0].elastic_changes(0).change() == "formed");
  const JobSummary::ElasticChange& lost = jobs[0].elastic_changes(1);
  CHECK(lost.change() == "lost");
  CHECK(lost.generation() == 1);
  CHECK(lost.detail() == "rank 1 (pid 7) on host a exited");
}

}  // namespace
}  // namespace ard::cluster
