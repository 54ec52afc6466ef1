// A running Job's tensors (job_tensors.cc) without network: SUBMIT frames over socketpairs ->
// the readiness table -> the negotiator -> the executor -> COMPLETE, in the committed order;
// joins; the requests the job refuses.
#include <cstring>

#include "absl/strings/match.h"
#include "catch2/catch.hpp"
#include "daemon/jobs/job.h"
#include "daemon/jobs/job_test_util.h"

namespace ard::jobs {
namespace {

using Code = absl::StatusCode;

ClientFrame ExpectComplete(TestClient& c, uint64_t request_id, Code code = Code::kOk) {
  ClientFrame f = c.Next();
  REQUIRE(f.type == wire::MsgType::kComplete);
  CHECK(f.request_id == request_id);
  CHECK(f.code == static_cast<int32_t>(code));
  return f;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

TEST_CASE("Two ranks' allreduce through SUBMIT frames completes with the sum") {
  JobHarness h(2, /*local_negotiator=*/true);
  TestClient& c0 = h.Add();
  TestClient& c1 = h.Add();  // the LocalNegotiator forms the job at once
  for (TestClient* c : {&c0, &c1}) REQUIRE(c->Next().type == wire::MsgType::kWelcome);
  const float in0[4] = {1, 2, 3, 4};
  const float in1[4] = {10, 20, 30, 40};
  c0.WriteInput(64, in0, sizeof(in0));
  c1.WriteInput(0, in1, sizeof(in1));

  h.Submit(c0, 1, FloatSum("grad", 4, /*offset=*/64));
  CHECK(c0.Quiet());  // waits for rank 1
  CHECK(h.Summary().pending_tensors() == 1);
  h.Submit(c1, 2, FloatSum("grad", 4));
  for (auto [c, id] : {std::pair<TestClient*, uint64_t>{&c0, 1}, {&c1, 2}}) {
    ClientFrame f = ExpectComplete(*c, id);
    CHECK(f.complete.bytes == 16);
    CHECK(f.complete.ndims == 1);
    CHECK(f.complete.shape[0] == 4);
    CHECK(Floats(c->ReadResult(f.complete.segment, f.complete.offset, f.complete.bytes)) ==
          std::vector<float>{11, 22, 33, 44});
    CHECK(c->session()->held_results() == 1);  // until RELEASE
  }
  JobSummary s = h.Summary();
  CHECK(s.collectives_completed() == 1);
  CHECK(s.bytes_reduced() == 16);
  CHECK(s.pending_tensors() == 0);
  CHECK(h.state() == JobState::kRunning);
}

TEST_CASE("A large allreduce runs on the executor thread and announces a new result segment") {
  JobOptions options = TestJobOptions();
  options.result_segment_bytes = 64 << 10;  // the result needs a second segment
  JobHarness h(2, /*local_negotiator=*/true, options);
  constexpr int64_t kN = 32 << 10;  // 128 KiB: above what runs inline on the loop
  TestClient& c0 = h.Add(-1, -1, kN * sizeof(float));
  TestClient& c1 = h.Add(-1, -1, kN * sizeof(float));
  for (TestClient* c : {&c0, &c1}) REQUIRE(c->Next().type == wire::MsgType::kWelcome);
  std::vector<float> in0(kN), in1(kN), sum(kN);
  for (int64_t i = 0; i < kN; ++i) {
    in0[i] = static_cast<float>(i % 1000);
    in1[i] = 0.5f;
    sum[i] = in0[i] + in1[i];
  }
  c0.WriteInput(0, in0.data(), kN * sizeof(float));
  c1.WriteInput(0, in1.data(), kN * sizeof(float));
  h.Submit(c0, 1, FloatSum("big", kN));
  h.Submit(c1, 2, FloatSum("big", kN));
  for (auto [c, id] : {std::pair<TestClient*, uint64_t>{&c0, 1}, {&c1, 2}}) {
    ClientFrame segment = c->Next();  // every rank maps it before a COMPLETE names it
    REQUIRE(segment.type == wire::MsgType::kResultSegment);
    CHECK(segment.segment.index == 1);
    CHECK(segment.segment.bytes >= kN * sizeof(float));
    ClientFrame f = ExpectComplete(*c, id);
    CHECK(f.complete.segment == 1);
    CHECK(f.complete.bytes == kN * sizeof(float));
    CHECK(Floats(c->ReadResult(1, f.complete.offset, f.complete.bytes)) == sum);
  }
}

TEST_CASE("A tensor every rank submitted goes to the negotiator and completes when committed") {
  JobHarness h(2);
  h.FormInOrder();
  TestClient& c0 = h.client(0);
  TestClient& c1 = h.client(1);
  FakeNegotiator& n = h.negotiator();
  h.Submit(c0, 1, Barrier("b1"));
  CHECK(n.ready.empty());
  h.Submit(c1, 2, Barrier("b1"));
  h.Submit(c0, 3, Barrier("b2"));
  h.Submit(c1, 4, Barrier("b2"));
  REQUIRE(n.ready.size() == 2);
  CHECK(n.ready[0].collective == wire::Collective::kBarrier);
  REQUIRE(n.ready[0].tensors.size() == 1);
  CHECK(n.ready[0].tensors[0].name == "b1");
  CHECK(n.ready[0].tensors[0].ranks.size() == 2);
  CHECK(c0.Quiet());  // host-ready is not committed
  CHECK(c1.Quiet());

  // The negotiator commits b2 before b1: the job runs them in that order.
  std::swap(n.ready[0], n.ready[1]);
  h.OnLoop([&] { n.CommitNext(); });
  ExpectComplete(c0, 3);
  ExpectComplete(c1, 4);
  CHECK(c0.Quiet());
  h.OnLoop([&] { n.CommitNext(); });
  CHECK(ExpectComplete(c0, 1).complete.bytes == 0);
  ExpectComplete(c1, 2);
  CHECK(h.Summary().collectives_completed() == 2);
  CHECK(n.failures.empty());
}

TEST_CASE("The first of several local ranks to submit a tensor tells the negotiator, once") {
  JobHarness h(3);
  h.FormInOrder();
  FakeNegotiator& n = h.negotiator();
  h.Submit(h.client(0), 1, Barrier("b"));
  CHECK(n.partly == std::vector<std::string>{"b"});
  h.Submit(h.client(1), 2, Barrier("b"));
  h.Submit(h.client(2), 3, Barrier("b"));  // ready: no longer partly submitted
  CHECK(n.partly == std::vector<std::string>{"b"});
  CHECK(n.ready.size() == 1);
  h.Submit(h.client(1), 4, Join());  // a join names no tensor
  CHECK(n.partly == std::vector<std::string>{"b"});
}

TEST_CASE("A committed error response fails only its tensor") {
  JobHarness h(2);
  h.FormInOrder();
  FakeNegotiator& n = h.negotiator();
  h.Submit(h.client(0), 1, Barrier("b"));
  h.Submit(h.client(1), 2, Barrier("b"));
  REQUIRE(n.ready.size() == 1);
  n.ready[0].error = absl::InvalidArgumentError("mismatched on host h-b");
  h.OnLoop([&] { n.CommitNext(); });
  CHECK(ExpectComplete(h.client(0), 1, Code::kInvalidArgument).message == "mismatched on host h-b");
  ExpectComplete(h.client(1), 2, Code::kInvalidArgument);
  CHECK(h.state() == JobState::kRunning);
}

TEST_CASE("OnJoinDone completes this host's join requests") {
  JobHarness h(2);
  h.FormInOrder();
  FakeNegotiator& n = h.negotiator();
  h.Submit(h.client(0), 9, Join());
  REQUIRE(n.joins.size() == 1);
  CHECK(n.joins[0].rank == 0);
  CHECK(n.joins[0].request_id == 9);
  CHECK(h.client(0).Quiet());
  h.OnLoop([&] { n.sink->OnJoinDone(absl::OkStatus(), 0); });
  ClientFrame f = ExpectComplete(h.client(0), 9);
  CHECK(f.complete.join_last_rank == 0);
  CHECK(h.client(1).Quiet());
  // Joins were reset: rank 0 may join again.
  h.Submit(h.client(0), 10, Join());
  CHECK(n.joins.size() == 2);
  CHECK(h.client(0).Quiet());
}

TEST_CASE("The job refuses bad submits and keeps running") {
  JobOptions options = TestJobOptions();
  options.max_pending_tensors = 1;
  JobHarness h(2, false, options);
  h.FormInOrder();
  TestClient& c0 = h.client(0);
  h.Submit(c0, 1, FloatSum("a", 4));
  SECTION("a name already in flight from the rank") {
    h.Submit(c0, 2, FloatSum("a", 4));
    ClientFrame f = c0.Next();
    CHECK(f.type == wire::MsgType::kError);
    CHECK(f.request_id == 2);
    CHECK(f.code == static_cast<int32_t>(Code::kInvalidArgument));
  }
  SECTION("more pending tensors than max_pending_tensors") {
    h.Submit(c0, 2, FloatSum("b", 4));
    ClientFrame f = ExpectComplete(c0, 2, Code::kResourceExhausted);
    CHECK(absl::StrContains(f.message, "max_pending_tensors"));
  }
  SECTION("an input outside the process's arena") {
    h.Submit(h.client(1), 2, FloatSum("a", 4, /*offset=*/8192));
    ExpectComplete(h.client(1), 2, Code::kInvalidArgument);
  }
  CHECK(h.state() == JobState::kRunning);
  CHECK(h.Summary().pending_tensors() == 1);
  CHECK(h.negotiator().failures.empty());
}

}  // namespace
}  // namespace ard::jobs
