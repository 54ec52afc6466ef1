// The coordinator's cross-host negotiation without sockets: formation and rank assignment,
// mismatch detection across hosts, fusion, the response cache on the wire, aborts, generations,
// stall inspection and the status of running and ended jobs.
#include "daemon/cluster/job_coordinator.h"

#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"
#include "daemon/cluster/job_coordinator_test_util.h"

namespace ard::cluster {
namespace {

using testing::FakeSink;
using testing::Meta;
using testing::Ready;
using testing::Registration;
using testing::TakingPart;

WatchJobRequest WatchOf(uint64_t job_id, const std::string& host, uint64_t generation = 1) {
  WatchJobRequest w;
  w.set_job_id(job_id);
  w.set_host(host);
  w.set_generation(generation);
  return w;
}

struct Fixture {
  EventLoop loop{"test"};  // never started: timers stay queued
  JobCoordinator coordinator{loop, JobCoordinatorOptions{1 << 20, 1, absl::Seconds(60), 2}};
  std::shared_ptr<FakeSink> a = std::make_shared<FakeSink>();
  std::shared_ptr<FakeSink> b = std::make_shared<FakeSink>();
  uint64_t job_id = 0;

  // Host "b" registers first; host order (by name) still decides the ranks.
  JobLayout Form() {
    absl::StatusOr<RegisterRanksResponse> ra, rb;
    coordinator.HandleRegisterRanks(Registration("b", 2, 4),
                                    [&](absl::StatusOr<RegisterRanksResponse> r) { rb = r; });
    REQUIRE(rb.status().code() == absl::StatusCode::kUnknown);  // not answered yet
    coordinator.HandleRegisterRanks(Registration("a", 2, 4),
                                    [&](absl::StatusOr<RegisterRanksResponse> r) { ra = r; });
    REQUIRE(ra.ok());
    REQUIRE(rb.ok());
    job_id = ra->layout().job_id();
    REQUIRE(coordinator.Watch(WatchOf(job_id, "a"), a).ok());
    REQUIRE(coordinator.Watch(WatchOf(job_id, "b"), b).ok());
    return ra->layout();
  }

  void Negotiate(const std::string& host,
                 std::vector<std::pair<std::string, std::vector<TensorMeta>>> ready,
                 std::vector<uint32_t> cached = {}) {
    NegotiateRequest request;
    request.set_job_id(job_id);
    request.set_generation(1);
    request.set_host(host);
    for (auto& [name, metas] : ready) {
      auto* t = request.add_ready();
      t->set_name(name);
      for (auto& m : metas) *t->add_ranks() = m;
    }
    for (uint32_t id : cached) request.add_cached_ids(id);
    absl::Status status = absl::UnknownError("unanswered");
    coordinator.HandleNegotiate(request,
                                [&](absl::StatusOr<NegotiateResponse> r) { status = r.status(); });
    REQUIRE(status.ok());
  }
};

TEST_CASE("ranks follow host order, then local rank; both hosts get the same layout") {
  Fixture f;
  JobLayout layout = f.Form();
  REQUIRE(layout.hosts_size() == 2);
  CHECK(layout.hosts(0).name() == "a");
  CHECK(layout.hosts(0).ranks(0) == 0);
  CHECK(layout.hosts(0).ranks(1) == 1);
  CHECK(layout.hosts(1).name() == "b");
  CHECK(layout.hosts(1).ranks(1) == 3);
  CHECK(layout.hosts(1).data_address() == "b:9000");
}

TEST_CASE("a mismatch between hosts fails the tensor on every host with Horovod's message") {
  Fixture f;
  f.Form();
  f.Negotiate("a", {{"x", {Meta(0, {2, 3}), Meta(1, {2, 3})}}});
  CHECK(f.a->events().empty());
  f.Negotiate("b", {{"x", {Meta(2, {3, 3}), Meta(3, {3, 3})}}});
  for (auto* sink : {f.a.get(), f.b.get()}) {
    const std::vector<JobEvent> events = sink->events();
    REQUIRE(events.size() == 1);
    const auto& r = events[0].responses(0);
    CHECK(r.error_code() == static_cast<int>(absl::StatusCode::kFailedPrecondition));
    CHECK(r.error() ==
          "Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [2, 3], but "
          "another rank sent a tensor of shape [3, 3].");
  }
}

TEST_CASE("ready allreduces are fused; names are cached and later sent as ids") {
  Fixture f;
  f.Form();
  std::vector<std::pair<std::string, std::vector<TensorMeta>>> a, b;
  for (const char* name : {"t1", "t2", "t3"}) {
    a.push_back({name, {Meta(0, {8}), Meta(1, {8})}});
    b.push_back({name, {Meta(2, {8}), Meta(3, {8})}});
  }
  f.Negotiate("a", a);
  f.Negotiate("b", b);
  auto events = f.b->events();
  REQUIRE(events.size() == 1);
  REQUIRE(events[0].responses_size() == 1);  // one fused response
  CHECK(events[0].responses(0).tensors_size() == 3);
  // Capacity 2: three puts evict the least recently used one.
  CHECK(events[0].cache_put_size() == 3);
  CHECK(events[0].cache_evict_size() == 1);
  std::map<std::string, uint32_t> ids;
  for (const auto& put : events[0].cache_put()) ids[put.name()] = put.id();
  // Next step: t3 travels as its cache id from both hosts and completes with full metadata.
  f.Negotiate("a", {}, {ids["t3"]});
  f.Negotiate("b", {}, {ids["t3"]});
  events = f.a->events();
  REQUIRE(events.size() == 2);
  REQUIRE(events[1].responses(0).tensors_size() == 1);
  CHECK(events[1].responses(0).tensors(0).name() == "t3");
  CHECK(TakingPart(events[1].responses(0).tensors(0), 4) == 4);
  CHECK(events[1].cache_put_size() == 0);  // a cache hit: nothing new to decide
  // An id nobody assigned aborts the job, naming the host.
  f.Negotiate("a", {}, {999});
  events = f.b->events();
  CHECK(events.back().abort().find("host a named unknown response-cache id 999") !=
        std::string::npos);
  CHECK(f.coordinator.job_count() == 0);
}

TEST_CASE("a large commit is split into several events in order, each about 1 MiB at most") {
  Fixture f;
  f.Form();
  std::vector<std::pair<std::string, std::vector<TensorMeta>>> a, b;
  // One fused response of ~2.6 MB (each name travels twice: the tensor and its cache put).
  constexpr int kTensors = 6000;
  for (int i = 0; i < kTensors; ++i) {
    const std::string name = std::string(200, 'x') + std::to_string(i);
    a.push_back({name, {Meta(0, {8}), Meta(1, {8})}});
    b.push_back({name, {Meta(2, {8}), Meta(3, {8})}});
  }
  f.Negotiate("a", a);
  f.Negotiate("b", b);
  auto events = f.b->events();
  REQUIRE(events.size() > 1);
  std::set<std::string> committed;
  for (const JobEvent& e : events) {
    CHECK(e.ByteSizeLong() <= (1u << 20) + 4096);
    for (const auto& r : e.responses()) {
      for (const auto& t : r.tensors()) {
        CHECK(TakingPart(t, 4) == 4);
        committed.insert(t.name());
      }
    }
  }
  CHECK(committed.size() == kTensors);
}

TEST_CASE("a host going DOWN aborts its jobs on every other host") {
  Fixture f;
  f.Form();
  f.coordinator.OnHostDown("b", "missed heartbeats for 5000 ms");
  auto events = f.a->events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].abort() == "host b is DOWN (missed heartbeats for 5000 ms)");
  CHECK(events[0].abort_code() == static_cast<int>(absl::StatusCode::kUnavailable));
}

TEST_CASE("a rank failure reported by one host aborts the job everywhere") {
  Fixture f;
  f.Form();
  NegotiateRequest request;
  request.set_job_id(f.job_id);
  request.set_generation(1);
  request.set_host("b");
  request.set_failure("rank 3 (pid 7) on host b exited");
  request.set_failure_code(10);
  f.coordinator.HandleNegotiate(request, [](absl::StatusOr<NegotiateResponse>) {});
  REQUIRE(f.a->events().size() == 1);
  CHECK(f.a->events()[0].abort() == "rank 3 (pid 7) on host b exited");
}

TEST_CASE("GPU path: every host's GPUs reach every host once all sent them, bad ones refused") {
  Fixture f;
  f.Form();
  auto send = [&](const std::string& host, GpuHost gpu) {
    NegotiateRequest request;
    request.set_job_id(f.job_id);
    request.set_generation(1);
    request.set_host(host);
    *request.mutable_gpu() = std::move(gpu);
    absl::Status status = absl::UnknownError("unanswered");
    f.coordinator.HandleNegotiate(
        request, [&](absl::StatusOr<NegotiateResponse> r) { status = r.status(); });
    return status;
  };
  GpuHost b;
  b.add_rank_devices(1);
  b.add_rank_devices(0);
  b.set_nccl_version("2.28.3");
  b.set_nccl_unique_id(std::string(128, 'b'));
  b.set_gpu_mode("auto");
  GpuHost a = b;
  a.set_nccl_unique_id(std::string(128, 'a'));
  a.set_gpu_mode("hierarchical");

  GpuHost one_gpu = b;  // b runs two ranks
  one_gpu.clear_rank_devices();
  one_gpu.add_rank_devices(0);
  CHECK(send("b", one_gpu).code() == absl::StatusCode::kInvalidArgument);
  GpuHost negative = b;
  negative.set_rank_devices(0, -1);
  CHECK(send("b", negative).code() == absl::StatusCode::kInvalidArgument);
  GpuHost short_id = b;
  short_id.set_nccl_unique_id("id");
  CHECK(send("b", short_id).code() == absl::StatusCode::kInvalidArgument);

  REQUIRE(send("b", b).ok());
  CHECK(send("b", b).code() == absl::StatusCode::kAlreadyExists);
  CHECK(f.a->events().empty());  // a has not sent its GPUs yet
  REQUIRE(send("a", a).ok());
  for (const auto& sink : {f.a, f.b}) {
    const std::vector<JobEvent> events = sink->events();
    REQUIRE(events.size() == 1);
    const GpuLayout& layout = events[0].gpu_layout();
    REQUIRE(layout.hosts_size() == 2);
    CHECK(layout.hosts(0).nccl_unique_id() == std::string(128, 'a'));  // cross rank 0 = a
    CHECK(layout.hosts(0).gpu_mode() == "hierarchical");
    CHECK(layout.hosts(1).rank_devices(0) == 1);
    CHECK(layout.hosts(1).nccl_unique_id() == std::string(128, 'b'));
  }
  CHECK(send("a", a).code() == absl::StatusCode::kAlreadyExists);
  CHECK(f.a->events().size() == 1);
}

TEST_CASE("a host whose ranks all left fails a tensor that still needs them") {
  Fixture f;
  f.Form();
  f.Negotiate("b", {{"extra", {Meta(2, {4}), Meta(3, {4})}}});
  NegotiateRequest left;
  left.set_job_id(f.job_id);
  left.set_generation(1);
  left.set_host("a");
  left.set_left(true);
  f.coordinator.HandleNegotiate(left, [](absl::StatusOr<NegotiateResponse>) {});
  REQUIRE(f.b->events().size() == 1);
  CHECK(f.b->events()[0].abort() ==
        "tensor extra of job train needs ranks 0 on a, 1 on a, which ended (their processes "
        "exited); it can never complete");
  CHECK(f.coordinator.job_count() == 0);
}

TEST_CASE("status is pure; the stall inspection aborts a job stalled for stall_shutdown") {
  EventLoop loop{"test"};  // never started: the inspection timer never fires by itself
  JobCoordinatorOptions options{1 << 20, 1, absl::Seconds(1), 2, absl::Seconds(2)};
  JobCoordinator coordinator{loop, options};
  absl::StatusOr<RegisterRanksResponse> ra, rb;
  coordinator.HandleRegisterRanks(Registration("a", 1, 2), [&](auto r) { ra = r; });
  coordinator.HandleRegisterRanks(Registration("b", 1, 2), [&](auto r) { rb = r; });
  REQUIRE(ra.ok());
  const uint64_t id = ra->layout().job_id();
  auto b = std::make_shared<FakeSink>();
  REQUIRE(coordinator.Watch(WatchOf(id, "b"), b).ok());
  const absl::Time submitted = absl::Now();
  coordinator.HandleNegotiate(Ready(id, "b", "slow", {1}), [](auto) {});
  // Not yet stalled for stall_shutdown: the job goes on.
  coordinator.InspectStalls(submitted + absl::Milliseconds(1500));
  CHECK(b->events().empty());
  // Status never aborts, however often it is asked.
  for (int i = 0; i < 3; ++i) CHECK(coordinator.Summaries().at(0).state() == "running");
  CHECK(b->events().empty());
  coordinator.InspectStalls(absl::Now() + absl::Seconds(3));
  REQUIRE(b->events().size() == 1);
  CHECK(b->events()[0].abort().rfind("stall shutdown: tensor slow waited ", 0) == 0);
  CHECK(b->events()[0].abort().find("for ranks 0 on a") != std::string::npos);
  CHECK(b->finished());
  CHECK(coordinator.job_count() == 0);
  // The job shows as failed, with the report, at once.
  const std::vector<JobSummary> jobs = coordinator.Summaries();
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].job_id() == id);
  CHECK(jobs[0].state() == "failed");
  CHECK(jobs[0].failure() == b->events()[0].abort());
  CHECK(jobs[0].hosts_size() == 2);
}

TEST_CASE("status: a running job with its stalled tensors, then failed or ended jobs") {
  Fixture f;
  f.Form();
  f.Negotiate("b", {{"late", {Meta(2, {4}), Meta(3, {4})}}});
  std::vector<JobSummary> jobs = f.coordinator.Summaries();
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].state() == "running");
  CHECK(jobs[0].pending_tensors() == 1);
  CHECK(jobs[0].stalled_size() == 0);  // stall_warning is 60 s
  CHECK(jobs[0].ranks(1).host() == "b");
  CHECK(jobs[0].ranks(1).pids(1) == 101);

  // A host's failure report: failed at once, with the reason; the job id answers with it.
  NegotiateRequest failure;
  failure.set_job_id(f.job_id);
  failure.set_generation(1);
  failure.set_host("a");
  failure.set_failure("rank 0 (pid 100) on host a exited");
  f.coordinator.HandleNegotiate(failure, [](auto) {});
  jobs = f.coordinator.Summaries();
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].state() == "failed");
  CHECK(jobs[0].failure() == "rank 0 (pid 100) on host a exited");
  CHECK(jobs[0].pending_tensors() == 0);
  absl::Status late = absl::UnknownError("unanswered");
  f.coordinator.HandleNegotiate(Ready(f.job_id, "b", "x", {2}), [&](auto r) { late = r.status(); });
  CHECK(late.code() == absl::StatusCode::kNotFound);
  CHECK(late.message() == absl::StrCat("job train (id ", f.job_id,
                                       ") has failed: rank 0 (pid 100) on host a exited"));

  // A job every host left: "ended".
  Fixture g;
  g.Form();
  for (const char* host : {"a", "b"}) {
    NegotiateRequest left;
    left.set_job_id(g.job_id);
    left.set_generation(1);
    left.set_host(host);
    left.set_left(true);
    g.coordinator.HandleNegotiate(left, [](auto) {});
  }
  CHECK(g.coordinator.job_count() == 0);
  CHECK(g.a->finished());
  jobs = g.coordinator.Summaries();
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].state() == "ended");
  CHECK(jobs[0].failure().empty());
}

TEST_CASE("a host DOWN fails its job in status at once; a host that left does not") {
  Fixture f;
  f.Form();
  f.coordinator.OnHostDown("b", "missed heartbeats for 1000 ms");
  const std::vector<JobSummary> jobs = f.coordinator.Summaries();
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].state() == "failed");
  CHECK(jobs[0].failure() == "host b is DOWN (missed heartbeats for 1000 ms)");
}

TEST_CASE("every event carries the job id and generation; stale generations are refused") {
  Fixture f;
  const JobLayout layout = f.Form();
  CHECK(layout.generation() == 1);
  NegotiateRequest stale = Ready(f.job_id, "a", "x", {0, 1});
  stale.set_generation(2);
  absl::Status status = absl::UnknownError("unanswered");
  f.coordinator.HandleNegotiate(stale, [&](auto r) { status = r.status(); });
  CHECK(status.code() == absl::StatusCode::kAborted);
  CHECK(status.message() == absl::StrCat("stale generation 2 of job train (id ", f.job_id,
                                         "): its current generation is 1"));
  CHECK(f.coordinator.Watch(WatchOf(f.job_id, "a", 7), std::make_shared<FakeSink>()).code() ==
        absl::StatusCode::kAborted);
  CHECK(f.coordinator.job_count() == 1);  // a stale caller does not harm the job

  NegotiateRequest current = Ready(f.job_id, "a", "x", {0, 1});
  current.set_generation(1);
  f.coordinator.HandleNegotiate(current, [&](auto r) { status = r.status(); });
  CHECK(status.ok());
  NegotiateRequest unset = Ready(f.job_id, "b", "x", {2, 3});
  unset.set_generation(0);  // a host must send the generation it runs
  f.coordinator.HandleNegotiate(unset, [&](auto r) { status = r.status(); });
  CHECK(absl::IsAborted(status));
  f.coordinator.HandleNegotiate(Ready(f.job_id, "b", "x", {2, 3}),
                                [&](auto r) { status = r.status(); });
  CHECK(status.ok());
  const std::vector<JobEvent> events = f.b->events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].responses_size() == 1);
  CHECK(events[0].job_id() == f.job_id);
  CHECK(events[0].generation() == 1);
}

TEST_CASE("peers outside the cluster, second streams and absurd requests are refused") {
  EventLoop loop{"test"};
  JobCoordinatorOptions options{1 << 20, 1, absl::Seconds(60), 2};
  options.is_up = [](const std::string& host) { return host == "a" || host == "b"; };
  JobCoordinator coordinator{loop, options};
  absl::StatusOr<RegisterRanksResponse> r;
  coordinator.HandleRegisterRanks(Registration("intruder", 1, 2), [&](auto x) { r = x; });
  CHECK(r.status().code() == absl::StatusCode::kPermissionDenied);
  RegisterRanksRequest huge = Registration("a", 1, 2);
  huge.set_size(2000000000);
  coordinator.HandleRegisterRanks(huge, [&](auto x) { r = x; });
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  RegisterRanksRequest forever = Registration("a", 1, 2);
  forever.set_timeout_ms(4000000000u);
  coordinator.HandleRegisterRanks(forever, [&](auto x) { r = x; });
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(coordinator.job_count() == 0);

  Fixture f;
  f.Form();
  CHECK(f.coordinator.Watch(WatchOf(f.job_id, "b"), std::make_shared<FakeSink>()).code() ==
        absl::StatusCode::kAlreadyExists);
  NegotiateRequest garbage;
  garbage.set_job_id(f.job_id);
  garbage.set_generation(1);
  garbage.set_host("b");
  auto* t = garbage.add_ready();
  t->set_name("x");
  *t->add_ranks() = Meta(1 << 30, {4});
  absl::Status status;
  f.coordinator.HandleNegotiate(garbage, [&](auto x) { status = x.status(); });
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(f.a->events().size() == 1);
  CHECK(f.a->events()[0].abort().rfind("host b sent an invalid request: rank 1073741824", 0) == 0);
}

}  // namespace
}  // namespace ard::cluster
