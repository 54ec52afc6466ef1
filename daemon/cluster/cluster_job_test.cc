// One cross-host job's negotiation state without sockets: events kept for hosts not watching
// yet, the outcome of Negotiate calls (reply and abort), status entries and stall inspection.
#include "daemon/cluster/cluster_job.h"

#include "catch2/catch.hpp"
#include "daemon/cluster/job_coordinator_test_util.h"

namespace ard::cluster {
namespace {

using testing::FakeSink;
using testing::Ready;

const absl::Time kFormed = absl::FromUnixSeconds(1000);

// Job "train" of 3 ranks: 0 and 1 on host a, 2 on host b; id 5, generation 1.
JobLayout Layout() {
  JobLayout layout;
  layout.set_job_id(5);
  layout.set_generation(1);
  layout.set_job("train");
  layout.set_size(3);
  auto* a = layout.add_hosts();
  a->set_name("a");
  a->add_ranks(0);
  a->add_ranks(1);
  a->add_pids(10);
  a->add_pids(11);
  auto* b = layout.add_hosts();
  b->set_name("b");
  b->add_ranks(2);
  b->add_pids(20);
  return layout;
}

TEST_CASE("events wait for a host that does not watch yet, stamped with id and generation") {
  ClusterJob job(Layout(), 1 << 20, 16, kFormed);
  auto a = std::make_shared<FakeSink>();
  REQUIRE(job.Watch("a", a).ok());
  CHECK(job.Negotiate(Ready(5, "a", "x", {0, 1}), kFormed).reply.ok());
  CHECK(a->events().empty());
  ClusterJob::Outcome outcome = job.Negotiate(Ready(5, "b", "x", {2}), kFormed);
  CHECK(outcome.reply.ok());
  CHECK(outcome.abort.ok());
  REQUIRE(a->events().size() == 1);
  CHECK(a->events()[0].job_id() == 5);
  CHECK(a->events()[0].generation() == 1);
  CHECK(testing::TakingPart(a->events()[0].responses(0).tensors(0), 3) == 3);
  auto b = std::make_shared<FakeSink>();
  REQUIRE(job.Watch("b", b).ok());
  REQUIRE(b->events().size() == 1);  // the backlog
  CHECK(b->events()[0].SerializeAsString() == a->events()[0].SerializeAsString());
  CHECK(job.Watch("b", std::make_shared<FakeSink>()).code() == absl::StatusCode::kAlreadyExists);
}

TEST_CASE("the status entry counts what the job committed and carries its generation") {
  ClusterJob job(Layout(), 1 << 20, 16, kFormed);
  CHECK(job.Summary(kFormed, absl::Seconds(60)).collectives_completed() == 0);
  job.Negotiate(Ready(5, "a", "x", {0, 1}), kFormed);
  job.Negotiate(Ready(5, "b", "x", {2}), kFormed);
  const JobSummary s = job.Summary(kFormed, absl::Seconds(60));
  CHECK(s.collectives_completed() == 1);
  CHECK(s.bytes_reduced() == Ready(5, "a", "x", {0}).ready(0).ranks(0).bytes());
  CHECK(s.generation() == 1);
}

TEST_CASE("a host's failure or malformed metadata asks for the job's abort") {
  ClusterJob job(Layout(), 1 << 20, 16, kFormed);
  NegotiateRequest failure;
  failure.set_job_id(5);
  failure.set_host("b");
  failure.set_failure("rank 2 (pid 20) on host b exited");
  failure.set_failure_code(static_cast<int>(absl::StatusCode::kUnavailable));
  ClusterJob::Outcome outcome = job.Negotiate(failure, kFormed);
  CHECK(outcome.reply.ok());
  CHECK(outcome.abort == absl::UnavailableError("rank 2 (pid 20) on host b exited"));

  NegotiateRequest bad = Ready(5, "b", "x", {2});
  bad.mutable_ready(0)->mutable_ranks(0)->set_rank(3);  // out of range for size 3
  outcome = job.Negotiate(bad, kFormed);
  CHECK(outcome.reply.code() == absl::StatusCode::kInvalidArgument);
  CHECK(outcome.abort.code() == absl::StatusCode::kInternal);
  CHECK(outcome.abort.message().rfind("host b sent an invalid request: ", 0) == 0);

  auto a = std::make_shared<FakeSink>();
  REQUIRE(job.Watch("a", a).ok());
  job.Abort(absl::AbortedError("stop"));
  REQUIRE(a->events().size() == 1);
  CHECK(a->events()[0].abort() == "stop");
  CHECK(a->events()[0].abort_code() == static_cast<int>(absl::StatusCode::kAborted));
  CHECK(a->finished());
}

TEST_CASE("status names stalled tensors' missing ranks and hosts; inspection decides shutdown") {
  ClusterJob job(Layout(), 1 << 20, 16, kFormed);
  REQUIRE(job.Negotiate(Ready(5, "b", "x", {2}), kFormed).reply.ok());
  JobSummary s = job.Summary(kFormed + absl::Seconds(1), absl::Seconds(5));
  CHECK(s.state() == "running");
  CHECK(s.job_id() == 5);
  CHECK(s.age_s() == 1);
  CHECK(s.pending_tensors() == 1);
  CHECK(s.stalled_size() == 0);
  s = job.Summary(kFormed + absl::Seconds(6), absl::Seconds(5));
  REQUIRE(s.stalled_size() == 1);
  CHECK(s.stalled(0).name() == "x");
  CHECK(s.stalled(0).waiting_s() == 6);
  CHECK(std::vector<int>(s.stalled(0).missing_ranks().begin(), s.stalled(0).missing_ranks().end()) ==
        std::vector<int>{0, 1});
  CHECK(s.stalled(0).missing_hosts(1) == "a");
  CHECK(s.ranks(1).pids(0) == 20);
  const negotiation::StallThresholds thresholds{absl::Seconds(5), absl::Seconds(10)};
  CHECK_FALSE(job.InspectStalls(kFormed + absl::Seconds(6), thresholds));
  CHECK(job.InspectStalls(kFormed + absl::Seconds(10), thresholds) ==
        "stall shutdown: tensor x waited 10.0s for ranks 0 on a, 1 on a");
}

TEST_CASE("a tensor that needs ranks of a host that left aborts; all hosts left ends the job") {
  ClusterJob job(Layout(), 1 << 20, 16, kFormed);
  NegotiateRequest left;
  left.set_job_id(5);
  left.set_host("a");
  left.set_left(true);
  ClusterJob::Outcome outcome = job.Negotiate(left, kFormed);
  CHECK(outcome.abort.ok());
  CHECK_FALSE(job.Active("a"));
  CHECK(job.Active("b"));
  CHECK_FALSE(job.ended());
  outcome = job.Negotiate(Ready(5, "b", "y", {2}), kFormed);
  CHECK(outcome.abort.code() == absl::StatusCode::kAborted);
  CHECK(outcome.abort.message() ==
        "tensor y of job train needs ranks 0 on a, 1 on a, which ended (their processes "
        "exited); it can never complete");

  ClusterJob done(Layout(), 1 << 20, 16, kFormed);
  for (const char* host : {"a", "b"}) {
    left.set_host(host);
    CHECK(done.Negotiate(left, kFormed).abort.ok());
  }
  CHECK(done.ended());
}

}  // namespace
}  // namespace ard::cluster
