#include "daemon/jobs/commit_road.h"

#include "absl/time/clock.h"
#include "catch2/catch.hpp"
#include "daemon/timeline/recorder.h"

namespace ard::jobs {
namespace {

using dataplane::CommitOrigin;
using negotiation::Response;

Response OneTensor(const std::string& name) {
  Response response;
  response.tensors.emplace_back().name = name;
  return response;
}

TEST_CASE("the road numbers central and released responses in one committed order") {
  CommitRoad road(nullptr);
  auto job = std::make_shared<dataplane::JobContext>();
  road.Open(job);
  CHECK(road.Admit(OneTensor("a"), CommitOrigin::kCentral) == 1);
  CHECK(road.Admit(OneTensor("b"), CommitOrigin::kReleased) == 2);
  CHECK(road.Admit(OneTensor("c"), CommitOrigin::kCentral) == 3);
}

TEST_CASE("a central response is dropped before formation and once the job stopped running") {
  CommitRoad road(nullptr);
  CHECK(road.Admit(OneTensor("early"), CommitOrigin::kCentral) == 0);
  auto job = std::make_shared<dataplane::JobContext>();
  road.Open(job);
  REQUIRE(job->Fail(absl::AbortedError("host b left")));
  CHECK(road.Admit(OneTensor("late"), CommitOrigin::kCentral) == 0);
  // A round released this one while the job ran: the executor completes it with the failure.
  CHECK(road.Admit(OneTensor("released"), CommitOrigin::kReleased) == 1);
}

TEST_CASE("every admitted tensor gets a commit mark with its group") {
  auto recorder = std::make_shared<timeline::Recorder>(64);
  recorder->Start(absl::Now() + absl::Hours(1));
  CommitRoad road(recorder);
  auto job = std::make_shared<dataplane::JobContext>();
  road.Open(job);
  Response two = OneTensor("a");
  two.tensors.emplace_back().name = "b";
  REQUIRE(road.Admit(two, CommitOrigin::kCentral) == 1);
  REQUIRE(road.Admit(OneTensor("c"), CommitOrigin::kReleased) == 2);
  job->Fail(absl::CancelledError("job ended"));
  REQUIRE(road.Admit(OneTensor("dropped"), CommitOrigin::kCentral) == 0);
  const timeline::Recording marks = recorder->Stop();
  REQUIRE(marks.events.size() == 3);
  CHECK(marks.events[0].tensor == "a");
  CHECK(marks.events[1].tensor == "b");
  CHECK(marks.events[2].tensor == "c");
  CHECK(marks.events[0].group == 1);
  CHECK(marks.events[1].group == 1);
  CHECK(marks.events[2].group == 2);
  for (const auto& e : marks.events) CHECK(e.mark == timeline::Mark::kCommit);
}

}  // namespace
}  // namespace ard::jobs
