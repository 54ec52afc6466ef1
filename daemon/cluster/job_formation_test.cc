// Formation without sockets: a job forms once every rank registered, with ranks by host order
// then local rank (the launcher's kept), the same layout to every host; bad registrations and
// timeouts fail every host that registered. Elastic jobs: max_np forms at once; the next
// generation forms once the last one's surviving hosts are back, ranks dense in their order; at
// most max_np ranks, the ones after them refused; a host's amended registration replaces its
// held one, and one that comes after its formation formed is refused.
#include "daemon/cluster/job_formation.h"

#include <deque>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "catch2/catch.hpp"
#include "daemon/cluster/job_coordinator_test_util.h"

namespace ard::cluster {
namespace {

using testing::Registration;

struct Formation {
  EventLoop loop{"test"};  // never started: timeouts stay queued
  std::vector<JobLayout> formed;
  JobFormation formation{loop, 7, [this](const JobLayout& l) { formed.push_back(l); }};
  std::map<std::string, absl::StatusOr<RegisterRanksResponse>> answers;

  void Register(const RegisterRanksRequest& request) {
    answers[request.host()] = absl::UnknownError("unanswered");
    formation.Register(request, [this, host = request.host()](auto r) { answers[host] = r; });
  }
  bool answered(const std::string& host) {
    return answers.at(host).status().code() != absl::StatusCode::kUnknown;
  }
};

TEST_CASE("a job forms when every rank registered; launcher's ranks kept, rest by host order") {
  Formation f;
  RegisterRanksRequest b = Registration("b", 2, 4);
  b.mutable_ranks(1)->set_rank(0);  // b's local rank 1 is global rank 0 (the launcher said so)
  f.Register(b);
  CHECK_FALSE(f.answered("b"));
  CHECK(f.formation.forming_count() == 1);
  RegisterRanksRequest a = Registration("a", 2, 4);
  std::swap(*a.mutable_ranks(0), *a.mutable_ranks(1));  // arrival order does not matter
  f.Register(a);
  REQUIRE(f.answers.at("a").ok());
  REQUIRE(f.answers.at("b").ok());
  REQUIRE(f.formed.size() == 1);
  const JobLayout& layout = f.answers.at("a")->layout();
  CHECK(layout.SerializeAsString() == f.answers.at("b")->layout().SerializeAsString());
  CHECK(layout.SerializeAsString() == f.formed[0].SerializeAsString());
  CHECK(layout.job_id() == (7ull << 24 | 1));
  CHECK(layout.generation() == 1);
  REQUIRE(layout.hosts_size() == 2);
  CHECK(layout.hosts(0).name() == "a");
  // Index = local rank: a's local ranks 0 and 1 take the free ranks 1 and 2, then b's local 0.
  CHECK(std::vector<int>(layout.hosts(0).ranks().begin(), layout.hosts(0).ranks().end()) ==
        std::vector<int>{1, 2});
  CHECK(std::vector<int>(layout.hosts(1).ranks().begin(), layout.hosts(1).ranks().end()) ==
        std::vector<int>{3, 0});
  CHECK(layout.hosts(0).pids(0) == 100);
  CHECK(layout.hosts(1).data_address() == "b:9000");
  CHECK(f.formation.forming_count() == 0);
}

TEST_CASE("a rank given twice fails every host that registered, naming the rank") {
  Formation f;
  RegisterRanksRequest a = Registration("a", 1, 2);
  a.mutable_ranks(0)->set_rank(1);
  RegisterRanksRequest b = Registration("b", 1, 2);
  b.mutable_ranks(0)->set_rank(1);
  f.Register(a);
  f.Register(b);
  for (const char* host : {"a", "b"}) {
    CHECK(f.answers.at(host).status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(f.answers.at(host).status().message() == "job train: rank 1 given twice");
  }
  CHECK(f.formed.empty());
  CHECK(f.formation.forming_count() == 0);
}

TEST_CASE("sizes that disagree, too many ranks and absurd registrations are refused") {
  Formation f;
  f.Register(Registration("a", 1, 3));
  f.Register(Registration("b", 1, 2));
  CHECK(f.answers.at("b").status().message() == "job train has size 3 on other hosts but 2 on b");
  f.Register(Registration("c", 3, 3));  // 1 + 3 ranks for a job of 3
  CHECK(f.answers.at("a").status().message() ==
        "job train: hosts registered 4 ranks for a job of size 3");
  CHECK(f.answers.at("c").status().code() == absl::StatusCode::kInvalidArgument);
  RegisterRanksRequest nameless = Registration("a", 1, 2);
  nameless.set_job("");
  f.Register(nameless);
  CHECK(f.answers.at("a").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(f.formed.empty());
}

TEST_CASE("a host that registers again supersedes its earlier registration, which is answered") {
  EventLoop loop("formation");
  loop.Start();
  JobFormation formation(loop, 7, [](const JobLayout&) {});
  absl::Notification first_answered;
  absl::Status first = absl::UnknownError("unanswered");
  bool second_answered = false;
  loop.Post([&] {
    formation.Register(Registration("a", 1, 3), [&](absl::StatusOr<RegisterRanksResponse> r) {
      first = r.status();
      first_answered.Notify();
    });
    formation.Register(Registration("a", 2, 3),
                       [&](absl::StatusOr<RegisterRanksResponse>) { second_answered = true; });
  });
  REQUIRE(first_answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  CHECK(absl::IsAborted(first));
  CHECK(first.message() ==
        "job train: host a registered again; this registration of 1 rank(s) is superseded");
  absl::Notification checked;
  loop.Post([&] {
    CHECK_FALSE(second_answered);  // 2 of 3 ranks: it still waits for the third
    checked.Notify();
  });
  checked.WaitForNotification();
  loop.Stop();
}

TEST_CASE("a host DOWN drops its registration; the job then needs it again") {
  Formation f;
  f.Register(Registration("a", 1, 2));
  f.formation.OnHostDown("a");
  f.Register(Registration("b", 1, 2));
  CHECK_FALSE(f.answered("b"));
  f.Register(Registration("a", 1, 2));
  CHECK(f.answers.at("b").ok());
  CHECK(f.formed.size() == 1);
}

// An elastic registration: `hints` are the ranks' places in rank order (their old ranks).
RegisterRanksRequest Elastic(const std::string& host, std::vector<int> hints, int max_np) {
  RegisterRanksRequest r = Registration(host, static_cast<int>(hints.size()), max_np);
  r.set_elastic_min_np(2);
  for (size_t i = 0; i < hints.size(); ++i) r.mutable_ranks(i)->set_rank(hints[i]);
  return r;
}

std::vector<int> RanksOf(const JobLayout& layout, int host) {
  return std::vector<int>(layout.hosts(host).ranks().begin(), layout.hosts(host).ranks().end());
}

TEST_CASE("an elastic job re-forms from the surviving hosts with dense ranks in their order") {
  Formation f;
  f.Register(Elastic("a", {0, 1}, 4));
  CHECK_FALSE(f.answered("a"));  // 2 of max_np 4, no earlier generation: waits to settle
  f.Register(Elastic("b", {2, 3}, 4));
  REQUIRE(f.answers.at("b").ok());
  CHECK(f.answers.at("b")->layout().generation() == 1);
  CHECK(f.answers.at("b")->layout().size() == 4);
  // Every host of a generation gets the same data-plane secret, 32 bytes.
  const std::string first_secret = f.answers.at("b")->layout().data_secret();
  CHECK(first_secret.size() == 32);
  CHECK(f.answers.at("a")->layout().data_secret() == first_secret);
  // b lost its rank 2 (old rank 2); a's ranks and b's other one come back: generation 2 forms
  // as soon as both hosts of generation 1 registered, numbered 0, 1 (a) and 2 (b).
  f.Register(Elastic("b", {3}, 4));
  CHECK_FALSE(f.answered("b"));
  f.Register(Elastic("a", {1, 0}, 4));
  REQUIRE(f.answers.at("a").ok());
  const JobLayout& two = f.answers.at("a")->layout();
  CHECK(two.generation() == 2);
  CHECK(two.size() == 3);
  CHECK(two.data_secret().size() == 32);
  CHECK(two.data_secret() != first_secret);          // a fresh secret per generation
  CHECK(RanksOf(two, 0) == std::vector<int>{1, 0});  // index = local rank; hint 0 -> rank 0
  CHECK(RanksOf(two, 1) == std::vector<int>{2});
  // Host b goes DOWN: a alone (>= min_np) is every surviving host of generation 2.
  f.formation.OnHostDown("b");
  f.Register(Elastic("a", {0, 1}, 4));
  REQUIRE(f.answers.at("a").ok());
  CHECK(f.answers.at("a")->layout().generation() == 3);
  CHECK(f.answers.at("a")->layout().size() == 2);
}

std::vector<int> LocalRanksOf(const JobLayout& layout, int host) {
  const auto& listed = layout.hosts(host).registered_local_ranks();
  return std::vector<int>(listed.begin(), listed.end());
}

TEST_CASE("an elastic formation takes at most max_np ranks, in rank order; the rest are refused") {
  Formation f;
  // max_np 3, 2 hosts x 2 ranks: the 4th in rank order (b's local rank 0, place 3) is left out.
  f.Register(Elastic("a", {0, 1}, 3));
  CHECK_FALSE(f.answered("a"));
  f.Register(Elastic("b", {3, 2}, 3));
  REQUIRE(f.answers.at("a").ok());
  REQUIRE(f.answers.at("b").ok());
  const JobLayout& one = f.answers.at("b")->layout();
  CHECK(one.size() == 3);
  REQUIRE(one.hosts_size() == 2);
  CHECK(RanksOf(one, 0) == std::vector<int>{0, 1});
  CHECK(LocalRanksOf(one, 0) == std::vector<int>{0, 1});
  CHECK(RanksOf(one, 1) == std::vector<int>{2});  // b's local rank 1 (place 2) is in
  CHECK(LocalRanksOf(one, 1) == std::vector<int>{1});
  CHECK(one.hosts(1).pids(0) == 101);
  // The next generation: a host whose ranks all come after max_np others is refused, naming why.
  f.Register(Elastic("c", {-1}, 3));
  f.Register(Elastic("b", {2}, 3));
  f.Register(Elastic("a", {0, 1}, 3));
  REQUIRE(f.answers.at("a").ok());
  CHECK(f.answers.at("a")->layout().generation() == 2);
  CHECK(f.answers.at("a")->layout().size() == 3);
  CHECK(f.answers.at("a")->layout().hosts_size() == 2);
  CHECK(f.answers.at("b").ok());
  const absl::Status refused = f.answers.at("c").status();
  CHECK(refused.code() == absl::StatusCode::kResourceExhausted);
  CHECK(refused.message() ==
        "elastic job train generation 2 formed with 3 ranks, its max_np: the 1 rank(s) of host c "
        "come after them in rank order and are not in it; start them again once a rank has left");
  // One host may register more ranks than max_np: the surplus is left out (places 4 and 5
  // first, then local rank 0 of the two without a place).
  RegisterRanksRequest d = Elastic("d", {-1, 4, -1, 5}, 3);
  d.set_job("other");
  f.Register(d);
  REQUIRE(f.answers.at("d").ok());
  const JobLayout& other = f.answers.at("d")->layout();
  CHECK(other.size() == 3);
  CHECK(RanksOf(other, 0) == std::vector<int>{2, 0, 1});
  CHECK(LocalRanksOf(other, 0) == std::vector<int>{0, 1, 3});
}

RegisterRanksRequest Amendment(std::vector<int> hints, uint64_t formation, uint32_t amendment) {
  RegisterRanksRequest r = Elastic("a", std::move(hints), 2);
  r.set_formation(formation);
  r.set_amendment(amendment);
  return r;
}

TEST_CASE("an elastic host amends its held registration; a stale or too late one is refused") {
  Formation f;
  std::deque<absl::Status> statuses;  // a held registration is answered later, if at all
  auto answer = [&](const RegisterRanksRequest& r) {
    absl::Status& status = statuses.emplace_back(absl::UnknownError("unanswered"));
    f.formation.Register(r, [&status](auto response) { status = response.status(); });
    return status;
  };
  // A process registered while host a's one-rank registration was held (1 < min_np 2): the
  // amendment with both replaces it, and the job forms.
  f.Register(Amendment({0}, 5, 0));
  CHECK_FALSE(f.answered("a"));
  f.Register(Amendment({0, 1}, 5, 1));
  REQUIRE(f.answers.at("a").ok());
  CHECK(f.answers.at("a")->layout().size() == 2);
  CHECK(f.answers.at("a")->layout().generation() == 1);
  CHECK(f.formation.forming_count() == 0);
  // Too late: the coordinator formed formation 5 (that answer is on its way): an amendment, or
  // the earlier registration retried after a failover, starts nothing.
  absl::Status late = answer(Amendment({0, 1, 2}, 5, 2));
  CHECK(late.code() == absl::StatusCode::kAlreadyExists);
  CHECK(late.message() ==
        "job train: host a's formation 5 already formed (generation 1, answered); its amendment "
        "2 with 3 rank(s) comes too late");
  CHECK(answer(Amendment({0}, 5, 0)).code() == absl::StatusCode::kAlreadyExists);
  CHECK(f.formation.forming_count() == 0);
  // An amendment arriving before the registration it replaces: the older one is stale.
  CHECK(answer(Amendment({0}, 6, 1)).code() == absl::StatusCode::kUnknown);  // held
  const absl::Status stale = answer(Amendment({0}, 6, 0));
  CHECK(stale.code() == absl::StatusCode::kAborted);
  CHECK(stale.message() ==
        "job train: host a's amendment 1 is held; this registration (amendment 0) is superseded");
  CHECK(f.formation.forming_count() == 1);
  // A coordinator that never saw formation 7 (it took over): an amendment is a registration.
  RegisterRanksRequest other = Amendment({0}, 7, 3);
  other.set_job("other");
  CHECK(answer(other).code() == absl::StatusCode::kUnknown);
  CHECK(f.formation.forming_count() == 2);
}

TEST_CASE("an elastic job below min_np fails at its timeout, saying so") {
  EventLoop loop("test");
  std::vector<JobLayout> formed;
  JobFormation formation(loop, 7, [&](const JobLayout& l) { formed.push_back(l); });
  RegisterRanksRequest a = Elastic("a", {0}, 0);
  a.set_timeout_ms(1000);
  absl::Notification answered;
  absl::Status status;
  loop.Start();
  loop.Post([&] {
    formation.Register(a, [&](auto r) {
      status = r.status();
      answered.Notify();
    });
  });
  REQUIRE(answered.WaitForNotificationWithTimeout(absl::Seconds(10)));
  loop.Stop();
  CHECK(status.code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(absl::StrContains(status.message(), "fewer than min_np 2"));
  CHECK(formed.empty());
}

}  // namespace
}  // namespace ard::cluster
