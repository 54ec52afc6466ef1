#include "daemon/jobs/job_state.h"

#include "catch2/catch.hpp"

namespace ard::jobs {
namespace {

TEST_CASE("A job forms, runs with generation 1, and ends") {
  JobLifecycle job;
  CHECK(job.state() == JobState::kForming);
  CHECK(job.generation() == 0);
  REQUIRE(job.Formed().ok());
  CHECK(job.state() == JobState::kRunning);
  CHECK(job.generation() == 1);
  REQUIRE(job.End().ok());
  CHECK(job.state() == JobState::kEnded);
  CHECK_FALSE(job.failed());
}

TEST_CASE("Re-forming starts the next generation") {
  JobLifecycle job;
  REQUIRE(job.Formed().ok());
  REQUIRE(job.Reform().ok());
  CHECK(job.state() == JobState::kReforming);
  CHECK(job.generation() == 1);  // until the new generation runs
  REQUIRE(job.Formed().ok());
  CHECK(job.generation() == 2);
  REQUIRE(job.Reform().ok());
  REQUIRE(job.Fail(absl::UnavailableError("too few ranks left")).ok());
  CHECK(job.failure() == "too few ranks left");
}

TEST_CASE("A job fails from forming, running or reforming, keeps its reason, then ends") {
  for (int from = 0; from < 3; ++from) {
    JobLifecycle job;
    if (from >= 1) REQUIRE(job.Formed().ok());
    if (from == 2) REQUIRE(job.Reform().ok());
    REQUIRE(job.Fail(absl::AbortedError("rank 1 exited")).ok());
    CHECK(job.state() == JobState::kFailed);
    CHECK(job.failure() == "rank 1 exited");
    REQUIRE(job.End().ok());
    CHECK(job.failure() == "rank 1 exited");
  }
  JobLifecycle forming;
  REQUIRE(forming.End().ok());  // every process left before it formed
}

TEST_CASE("Transitions the diagram does not have are refused and change nothing") {
  JobLifecycle job;
  CHECK(absl::IsFailedPrecondition(job.Reform()));  // forming -> reforming
  REQUIRE(job.Formed().ok());
  CHECK(absl::IsFailedPrecondition(job.Formed()));  // running -> running
  CHECK(job.generation() == 1);
  REQUIRE(job.Fail(absl::AbortedError("x")).ok());
  CHECK(absl::IsFailedPrecondition(job.Formed()));  // failed -> running
  CHECK(absl::IsFailedPrecondition(job.Reform()));
  CHECK(absl::IsFailedPrecondition(job.Fail(absl::AbortedError("y"))));
  CHECK(job.failure() == "x");
  REQUIRE(job.End().ok());
  CHECK(absl::IsFailedPrecondition(job.End()));
  CHECK(absl::IsFailedPrecondition(job.Formed()));
  CHECK(job.state() == JobState::kEnded);
  JobLifecycle fresh;
  CHECK(absl::IsInvalidArgument(fresh.Fail(absl::OkStatus())));
  CHECK(fresh.state() == JobState::kForming);
}

TEST_CASE("an elastic job's next generation forms as the one after its predecessor's") {
  JobLifecycle next(3);  // generation 3 re-forms: its successor starts forming
  CHECK(next.state() == JobState::kForming);
  CHECK(next.generation() == 3);
  REQUIRE(next.Formed().ok());
  CHECK(next.generation() == 4);
  REQUIRE(next.Reform().ok());  // lost a member: this generation ends, the job goes on
  CHECK(next.state() == JobState::kReforming);
  CHECK_FALSE(next.failed());
  REQUIRE(next.End().ok());
}

}  // namespace
}  // namespace ard::jobs
