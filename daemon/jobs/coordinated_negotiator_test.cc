// CoordinatedNegotiator's formation of an elastic generation on a real event loop, the
// coordinator scripted: a second FormAsync while the first registration is held amends it (same
// formation, next amendment, every member), and whichever registration the coordinator formed
// from decides, once: the replaced one's ABORTED and a too late amendment's ALREADY_EXISTS are
// not answers.
#include "daemon/jobs/coordinated_negotiator.h"

#include <optional>

#include "absl/synchronization/notification.h"
#include "catch2/catch.hpp"

namespace ard::jobs {
namespace {

// Holds every RegisterRanks call until the test answers it.
class HeldCoordinator : public cluster::NegotiationClient {
 public:
  void RegisterRanksAsync(const RegisterRanksRequest& request, absl::Duration,
                          cluster::Done<RegisterRanksResponse> done) override {
    requests.push_back(request);
    dones.push_back(std::move(done));
  }
  void NegotiateAsync(const NegotiateRequest&, cluster::Done<NegotiateResponse> done) override {
    done(NegotiateResponse());
  }
  std::shared_ptr<cluster::JobWatch> WatchJob(const WatchJobRequest&,
                                              std::function<void(const JobEvent&)>,
                                              std::function<void(absl::Status)>) override {
    return nullptr;
  }
  std::vector<RegisterRanksRequest> requests;  // the loop's (the negotiator calls on it)
  std::vector<cluster::Done<RegisterRanksResponse>> dones;
};

// The coordinator's answer forming `ranks` ranks, all on host h-test.
RegisterRanksResponse Formed(int ranks) {
  RegisterRanksResponse r;
  JobLayout& layout = *r.mutable_layout();
  layout.set_job("train");
  layout.set_job_id(9);
  layout.set_generation(3);
  layout.set_size(ranks);
  JobLayout::JobHost& host = *layout.add_hosts();
  host.set_name("h-test");
  host.set_data_address("h-test:9000");
  for (int i = 0; i < ranks; ++i) {
    host.add_ranks(i);
    host.add_pids(100 + i);
    host.add_registered_local_ranks(i);
  }
  return r;
}

struct Harness {
  Harness() {
    options.host_name = "h-test";
    loop.Start();
    negotiator.emplace(loop, coordinator, options, "h-test:9000", "train", 0, 0,
                       ElasticSpec{/*min_np=*/2, /*max_np=*/0, /*coordinated=*/true, 0});
    // One process registered, then a second while the coordinator held the first's registration.
    OnLoop([&] {
      negotiator->FormAsync({{0, -1, 100}}, [&](auto f) { first.push_back(std::move(f)); });
      negotiator->FormAsync({{0, -1, 100}, {1, -1, 101}},
                            [&](auto f) { last.push_back(std::move(f)); });
    });
  }
  ~Harness() {
    OnLoop([&] { negotiator.reset(); });
    loop.Stop();
  }
  void OnLoop(std::function<void()> f) {
    absl::Notification done;
    loop.Post([&] {
      f();
      done.Notify();
    });
    done.WaitForNotification();
  }
  // Answers registration `i`, then lets the channel's posted answer run.
  void Answer(size_t i, absl::StatusOr<RegisterRanksResponse> answer) {
    OnLoop([&] { coordinator.dones.at(i)(std::move(answer)); });
    OnLoop([] {});
  }

  JobOptions options;
  EventLoop loop{"negotiator-test"};
  HeldCoordinator coordinator;
  std::optional<CoordinatedNegotiator> negotiator;
  std::vector<absl::StatusOr<Formation>> first;
  std::vector<absl::StatusOr<Formation>> last;
};

TEST_CASE("A second FormAsync while the first is held amends the registration") {
  Harness h;
  const auto& requests = h.coordinator.requests;
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].formation() != 0);
  CHECK(requests[1].formation() == requests[0].formation());
  CHECK(requests[0].amendment() == 0);
  CHECK(requests[1].amendment() == 1);
  CHECK(requests[0].ranks_size() == 1);
  CHECK(requests[1].ranks_size() == 2);
  CHECK(requests[1].elastic_min_np() == 2);

  SECTION("the amendment replaced the first: it forms both") {
    h.Answer(0, absl::AbortedError("host h-test registered again; superseded"));
    CHECK(h.last.empty());  // not an answer: the amendment's decides
    h.Answer(1, Formed(2));
    REQUIRE(h.last.size() == 1);
    REQUIRE(h.last[0].ok());
    CHECK(h.last[0]->ranks == std::vector<int>{0, 1});
    CHECK(h.last[0]->generation == 3);
  }
  SECTION("the amendment came too late, refused first: the first registration's answer decides") {
    h.Answer(1, absl::AlreadyExistsError("formation already formed"));
    CHECK(h.last.empty());
    h.Answer(0, Formed(1));
    REQUIRE(h.last.size() == 1);
    REQUIRE(h.last[0].ok());
    CHECK(h.last[0]->ranks == std::vector<int>{0});  // the second member joins the next one
  }
  SECTION("the amendment came too late, answered first: the refusal after it changes nothing") {
    h.Answer(0, Formed(1));
    h.Answer(1, absl::AlreadyExistsError("formation already formed"));
    REQUIRE(h.last.size() == 1);
    CHECK(h.last[0]->ranks == std::vector<int>{0});
  }
  SECTION("the first failed before the amendment arrived: that failure is the answer") {
    h.Answer(0, absl::DeadlineExceededError("did not form within 1m"));
    h.Answer(1, absl::AlreadyExistsError("formation already formed"));
    REQUIRE(h.last.size() == 1);
    CHECK(h.last[0].status().code() == absl::StatusCode::kDeadlineExceeded);
  }
  CHECK(h.first.empty());  // a replaced call's `done` never runs
}

}  // namespace
}  // namespace ard::jobs
