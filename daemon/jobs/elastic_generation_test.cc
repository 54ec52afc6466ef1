#include "daemon/jobs/elastic_generation.h"

#include "catch2/catch.hpp"
#include "daemon/negotiation/elastic_settle.h"

namespace ard::jobs {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);
const absl::Duration kSettle = absl::Milliseconds(500);

Predecessors None() { return {false, absl::InfinitePast(), {}, kSettle}; }

TEST_CASE("A fixed job forms once every local rank registered, never by the settle rule") {
  ElasticGeneration fixed;
  CHECK_FALSE(fixed.elastic());
  CHECK_FALSE(fixed.Complete(1, 2));
  CHECK(fixed.Complete(2, 2));
  CHECK_FALSE(fixed.FormsNow({1, 2}, 0, None(), kT0 + absl::Hours(1)));
  bool reform = true;
  const absl::Status lost =
      fixed.OnLost(absl::AbortedError("rank 1 exited"), "j", 1, false, &reform);
  CHECK_FALSE(reform);
  CHECK(lost.message() == "rank 1 exited");
}

TEST_CASE("A first elastic generation waits for the launcher's local size, else settles") {
  ElasticGeneration launched(ElasticSpec{2, 0, false, 3});
  launched.Arrived(kT0);
  CHECK_FALSE(launched.Complete(3, 3));  // elastic jobs form by FormsNow only
  CHECK_FALSE(launched.FormsNow({1, 2}, 0, None(), kT0 + absl::Hours(1)));
  CHECK(launched.FormsNow({1, 2, 3}, 0, None(), kT0));

  ElasticGeneration unlaunched(ElasticSpec{2, 0, false, 0});
  unlaunched.Arrived(kT0);
  CHECK_FALSE(unlaunched.FormsNow({1, 2}, 0, None(), kT0 + kSettle / 2));
  CHECK(unlaunched.FormsNow({1, 2}, 0, None(), kT0 + kSettle));
  CHECK_FALSE(unlaunched.FormsNow({1}, 0, None(), kT0 + kSettle));  // fewer than min_np here
}

TEST_CASE("A coordinated generation leaves min_np to the coordinator; max_np forms at once") {
  ElasticGeneration coordinated(ElasticSpec{4, 0, true, 0});
  coordinated.Arrived(kT0);
  CHECK(coordinated.FormsNow({1}, 0, None(), kT0 + kSettle));
  ElasticGeneration bounded(ElasticSpec{1, 2, false, 0});
  bounded.Arrived(kT0);
  CHECK(bounded.FormsNow({1, 2}, 0, None(), kT0));
}

TEST_CASE(
    "A successor waits for its returning processes that run, or settles after the last left") {
  ElasticGeneration next(ElasticSpec{1, 0, false, 0});
  next.Arrived(kT0);
  const absl::Time left = kT0 + absl::Seconds(1);
  Predecessors before{false, left, {10, 11}, kSettle};
  CHECK(next.FormsNow({10, 11}, 1, before, left));
  // 11 still runs (re-initialising on a loaded host): waited for past the settle window, up to
  // kSurvivorWait from the later of arrival and departure.
  CHECK_FALSE(next.FormsNow({10}, 1, before, left + 4 * kSettle));
  CHECK_FALSE(next.FormsNow({10}, 1, before, left + negotiation::kSurvivorWait / 2));
  CHECK(next.FormsNow({10}, 1, before, left + negotiation::kSurvivorWait));
  // 11 died meanwhile (Succession::Before lists only running ones): it is not waited for.
  before.returning = {10};
  CHECK(next.FormsNow({10}, 1, before, left));
  // Nobody expected back: it forms at once.
  before.returning = {};
  ElasticGeneration fresh(ElasticSpec{1, 0, false, 0});
  fresh.Arrived(left);
  CHECK(fresh.FormsNow({12}, 1, before, left));
  before.attached = true;  // a process of the old generation is still attached
  CHECK_FALSE(next.FormsNow({10, 11}, 1, before, kT0 + absl::Hours(1)));
}

TEST_CASE("A lost member re-forms an elastic generation unless the daemon stops") {
  ElasticGeneration g(ElasticSpec{1, 0, false, 0});
  bool reform = false;
  const absl::Status s = g.OnLost(absl::AbortedError("rank 1 exited"), "j", 3, false, &reform);
  CHECK(reform);
  CHECK(absl::IsAborted(s));
  CHECK(s.message() == "elastic job j generation 3 re-forms: rank 1 exited");
  CHECK_FALSE(g.reform_pending());
  g.Reformed(std::string(s.message()));
  CHECK(g.reform_pending());
  CHECK(g.reform_reason() == s.message());
  CHECK(g.OnLost(absl::UnavailableError("shutting down"), "j", 3, true, &reform).message() ==
        "shutting down");
  CHECK_FALSE(reform);
}

TEST_CASE("Processes that leave cleanly after a re-formation started are expected back") {
  ElasticGeneration g(ElasticSpec{1, 0, false, 0});
  g.Left(5, true);  // before: a normal end
  CHECK(g.Returning({7}) == std::set<uint32_t>{7});
  g.Reformed("lost rank 2");
  g.Left(6, false);  // crashed: not coming back
  g.Left(5, true);
  CHECK(g.Returning({7}) == std::set<uint32_t>{5, 7});
}

TEST_CASE("Members hear once, while running, that ranks wait to join") {
  ElasticGeneration g(ElasticSpec{1, 0, false, 0});
  CHECK_FALSE(g.HostsUpdated(JobState::kForming));
  CHECK(g.HostsUpdatePending());
  CHECK(g.reform_pending());
  CHECK(g.HostsUpdated(JobState::kRunning));
  CHECK_FALSE(g.HostsUpdatePending());
  CHECK_FALSE(g.HostsUpdated(JobState::kRunning));
}

TEST_CASE("A generation at max_np has room only for its own members") {
  ElasticGeneration g(ElasticSpec{1, 2, false, 0});
  CHECK(g.HasRoom(JobState::kRunning, 1, 9, {1}));
  CHECK_FALSE(g.HasRoom(JobState::kRunning, 2, 9, {1, 2}));
  CHECK(g.HasRoom(JobState::kRunning, 2, 2, {1, 2}));
  CHECK(g.HasRoom(JobState::kForming, 2, 9, {1, 2}));
  CHECK(ElasticGeneration(ElasticSpec{1, 0, false, 0}).HasRoom(JobState::kRunning, 8, 9, {}));
}

}  // namespace
}  // namespace ard::jobs
