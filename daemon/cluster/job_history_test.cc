// The bounded history of ended jobs: count and age bounds, lookup by id, age that keeps counting;
// elastic jobs' changes by name: bounded per job, forgotten after max_age, the latest formation.
#include "daemon/cluster/job_history.h"

#include "catch2/catch.hpp"

namespace ard::cluster {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

JobSummary Ended(uint64_t id, const std::string& state) {
  JobSummary s;
  s.set_name("job" + std::to_string(id));
  s.set_job_id(id);
  s.set_state(state);
  s.set_age_s(10);
  return s;
}

TEST_CASE("the last `capacity` ended jobs are kept, oldest first") {
  JobHistory history(2, absl::Hours(1));
  history.Add(Ended(1, "failed"), kT0);
  history.Add(Ended(2, "ended"), kT0 + absl::Seconds(1));
  history.Add(Ended(3, "failed"), kT0 + absl::Seconds(2));
  const std::vector<JobSummary> jobs = history.Summaries(kT0 + absl::Seconds(4));
  REQUIRE(jobs.size() == 2);
  CHECK(jobs[0].job_id() == 2);
  CHECK(jobs[1].job_id() == 3);
  CHECK(jobs[1].age_s() == 12);       // 10 s old when it ended, 2 s ago
  CHECK(jobs[1].duration_s() == 10);  // what it lasted, whatever its age
  CHECK(history.Find(1) == nullptr);
  REQUIRE(history.Find(3) != nullptr);
  CHECK(history.Find(3)->state() == "failed");
}

TEST_CASE("ended jobs older than max_age are not shown, and are dropped as others end") {
  JobHistory history(8, absl::Minutes(1));
  history.Add(Ended(1, "failed"), kT0);
  CHECK(history.Summaries(kT0 + absl::Seconds(59)).size() == 1);
  CHECK(history.Summaries(kT0 + absl::Seconds(61)).empty());
  CHECK(history.Find(1) != nullptr);
  history.Add(Ended(2, "ended"), kT0 + absl::Seconds(61));
  CHECK(history.Find(1) == nullptr);
  CHECK(history.Summaries(kT0 + absl::Seconds(61)).size() == 1);
}

TEST_CASE("capacity zero keeps nothing") {
  JobHistory history(0, absl::Hours(1));
  history.Add(Ended(1, "failed"), kT0);
  CHECK(history.Summaries(kT0).empty());
  CHECK(history.Find(1) == nullptr);
}

JobSummary::ElasticChange Change(const std::string& what, uint64_t generation, uint32_t size) {
  JobSummary::ElasticChange c;
  c.set_change(what);
  c.set_generation(generation);
  c.set_size(size);
  return c;
}

TEST_CASE("elastic changes by job: oldest first with their age, the latest formation, bounds") {
  JobHistory history(8, absl::Minutes(1));
  CHECK(history.LastFormation("train") == nullptr);
  history.AddChange("train", Change("formed", 1, 4), kT0);
  history.AddChange("train", Change("hosts updated", 1, 2), kT0 + absl::Seconds(1));
  history.AddChange("other", Change("formed", 1, 2), kT0 + absl::Seconds(2));
  const auto changes = history.Changes("train", kT0 + absl::Seconds(5));
  REQUIRE(changes.size() == 2);
  CHECK(changes[0].change() == "formed");
  CHECK(changes[0].age_s() == 5);
  CHECK(changes[1].age_s() == 4);
  REQUIRE(history.LastFormation("train") != nullptr);
  CHECK(history.LastFormation("train")->size() == 4);  // "hosts updated" is no formation
  CHECK(history.Changes("train", kT0 + absl::Seconds(62)).empty());  // quiet for max_age
  history.AddChange("other", Change("grown", 2, 6), kT0 + absl::Seconds(62));
  CHECK(history.LastFormation("train") == nullptr);  // forgotten as others change
  for (uint64_t g = 0; g < JobHistory::kChangesKept + 3; ++g) {
    history.AddChange("other", Change("re-formed", g, 6), kT0 + absl::Seconds(63));
  }
  const auto kept = history.Changes("other", kT0 + absl::Seconds(63));
  REQUIRE(kept.size() == JobHistory::kChangesKept);
  CHECK(kept.back().generation() == JobHistory::kChangesKept + 2);
}

}  // namespace
}  // namespace ard::cluster
