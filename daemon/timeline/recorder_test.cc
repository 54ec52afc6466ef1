#include "daemon/timeline/recorder.h"

#include <catch2/catch.hpp>

#include "daemon/timeline/hub.h"

namespace ard::timeline {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST_CASE("a recorder records nothing until started and stops at its deadline") {
  Recorder r(8);
  r.RecordAt(Mark::kSubmit, 0, 0, "a", kT0);
  CHECK_FALSE(r.on());
  r.Start(kT0 + absl::Seconds(1));
  r.RecordAt(Mark::kSubmit, 1, 0, "a", kT0);
  r.RecordAt(Mark::kCommit, -1, 7, "a", kT0 + absl::Milliseconds(5));
  r.RecordAt(Mark::kSubmit, 0, 0, "b", kT0 + absl::Seconds(2));  // past the deadline
  CHECK_FALSE(r.on());
  Recording got = r.Stop();
  REQUIRE(got.events.size() == 2);
  CHECK(got.events[0].rank == 1);
  CHECK(got.events[1].mark == Mark::kCommit);
  CHECK(got.events[1].group == 7);
  CHECK(got.events[1].time_us == absl::ToUnixMicros(kT0) + 5000);
  CHECK(r.Stop().events.empty());
}

TEST_CASE("a full ring keeps the newest marks, oldest first, and counts the dropped") {
  Recorder r(3);
  r.Start(absl::InfiniteFuture());
  for (int i = 0; i < 5; ++i) r.RecordAt(Mark::kSubmit, i, 0, "t", kT0 + absl::Seconds(i));
  Recording got = r.Stop();
  REQUIRE(got.events.size() == 3);
  CHECK(got.events[0].rank == 2);
  CHECK(got.events[2].rank == 4);
  CHECK(got.dropped == 2);
}

TEST_CASE("the hub arms a job's recorder before the job exists and caps the duration") {
  Hub hub(16, absl::Minutes(10));
  CHECK(hub.Stop("j").status().code() == absl::StatusCode::kNotFound);
  CHECK(hub.Start("j", absl::ZeroDuration(), kT0) == absl::Minutes(10));
  CHECK(hub.Start("j", absl::Seconds(5), kT0) == absl::Seconds(5));
  std::shared_ptr<Recorder> job = hub.ForJob("j");  // the job made after the start
  CHECK(job->on());
  job->RecordAt(Mark::kReady, -1, 0, "x", kT0 + absl::Seconds(1));
  auto got = hub.Stop("j");
  REQUIRE(got.ok());
  REQUIRE(got->events.size() == 1);
  CHECK(got->events[0].tensor == "x");
  CHECK_FALSE(job->on());
  CHECK(hub.ForJob("j") == job);  // kept while the job holds it
}

}  // namespace
}  // namespace ard::timeline
