// SteadyNegotiator as a decorator (the rounds themselves: steady_state_test, steady_rounds_test):
// without rounds it passes everything through; with them, the coordinator's lists and the GPU
// marker wait for a round, and what they hold reaches the job's failure.
#include "daemon/jobs/steady_negotiator.h"

#include <cstdio>
#include <memory>
#include <vector>

#include "catch2/catch.hpp"
#include "daemon/jobs/fake_negotiator.h"

namespace ard::jobs {
namespace {

using negotiation::CommittedList;
using negotiation::ReadyTensor;
using negotiation::Response;
using negotiation::TensorRequest;

struct RecordingSink : NegotiationSink {
  void OnCommitted(Response response) override { committed.push_back(std::move(response)); }
  void OnJoinDone(const absl::Status& status, int) override { joins_done.push_back(status); }
  void OnFailedElsewhere(const absl::Status& status) override { failed.push_back(status); }
  std::vector<Response> committed;
  std::vector<absl::Status> joins_done;
  std::vector<absl::Status> failed;
};

TensorRequest Request(int rank, const char* name) {
  TensorRequest r;
  r.rank = rank;
  r.request_id = 100 + rank;
  r.meta.collective = static_cast<uint32_t>(wire::Collective::kAllreduce);
  std::snprintf(r.meta.name, sizeof(r.meta.name), "%s", name);
  return r;
}

// Rank 0 on this host, rank 1 on the other one.
dataplane::HostLayout TwoHosts() {
  dataplane::HostLayout hosts;
  hosts.job = "j";
  hosts.size = 2;
  hosts.cross_size = 2;
  hosts.host_of_rank = {0, 1};
  hosts.ranks_of_host = {{0}, {1}};
  hosts.host_names = {"a", "b"};
  return hosts;
}

// A list committing `name` for both ranks (this host's entry with its request).
CommittedList ListOf(const char* name) {
  ReadyTensor t{name, std::vector<negotiation::RankEntry>(2)};
  t.ranks[0] = Request(0, name);
  t.ranks[1] = Request(1, name);
  CommittedList list;
  list.responses.emplace_back().tensors.push_back(std::move(t));
  return list;
}

struct Fixture {
  Fixture() {
    auto fake = std::make_unique<FakeNegotiator>();
    central = fake.get();
    steady = std::make_unique<SteadyNegotiator>(loop, options, "j", std::move(fake));
    steady->FormAsync({{0, 0, 7}}, [this](absl::StatusOr<Formation> f) { formed = f.ok(); });
    Formation f;
    f.ranks = {0};
    f.local_ranks = {0};
    f.local_size = 1;
    f.hosts = TwoHosts();
    central->CompleteForm(0, std::move(f));
    steady->Start(&sink);
  }
  EventLoop loop{"test"};
  JobOptions options;
  FakeNegotiator* central = nullptr;  // owned by `steady`
  std::unique_ptr<SteadyNegotiator> steady;
  RecordingSink sink;
  bool formed = false;
};

TEST_CASE("without rounds the steady negotiator passes everything through") {
  Fixture f;
  REQUIRE(f.formed);
  CHECK(f.central->sink != &f.sink);  // the central strategy's events pass the decorator first
  CHECK(f.steady->StartRounds(nullptr) == nullptr);  // no cross-host data plane: no rounds
  std::vector<Response> ready(1);
  ready[0].tensors.push_back(ReadyTensor{"a", std::vector<negotiation::RankEntry>(2)});
  f.steady->HostReady(std::move(ready));
  REQUIRE(f.central->ready.size() == 1);
  f.central->sink->OnCommittedList(ListOf("a"));
  REQUIRE(f.sink.committed.size() == 1);
  CHECK(f.sink.committed[0].tensors[0].name == "a");
  f.central->sink->OnGpuLayoutArrived();  // no marker without rounds
  CHECK(f.sink.committed.size() == 1);
  f.steady->Join(Request(0, "join"));
  f.central->sink->OnJoinDone(absl::OkStatus(), 0);
  CHECK(f.central->joins.size() == 1);
  CHECK(f.sink.joins_done.size() == 1);
}

TEST_CASE("with rounds, lists and the GPU marker wait for a round; a failure takes their tensors") {
  Fixture f;
  dataplane::TcpCollective tcp(TwoHosts(), [] {
    return absl::StatusOr<std::unique_ptr<dataplane::tcp::TcpMesh>>(
        absl::UnavailableError("never connected in this test"));
  });
  REQUIRE(f.steady->StartRounds(&tcp) != nullptr);
  f.central->sink->OnCommittedList(ListOf("a"));
  f.central->sink->OnGpuLayoutArrived();
  CHECK(f.sink.committed.empty());  // released only by a round, at the same place on every host
  // Not cached yet: a host-ready tensor still goes to the coordinator.
  std::vector<Response> ready(1);
  ready[0].tensors.push_back(ReadyTensor{"b", std::vector<negotiation::RankEntry>(2)});
  ready[0].tensors[0].ranks[0] = Request(0, "b");
  f.steady->HostReady(std::move(ready));
  REQUIRE(f.central->ready.size() == 1);
  // The job failed: this host's entries of the held list and of the central tensor.
  std::vector<TensorRequest> uncommitted = f.steady->TakeUncommitted();
  REQUIRE(uncommitted.size() == 2);
  CHECK(uncommitted[0].name() == "b");
  CHECK(uncommitted[1].name() == "a");
  CHECK(uncommitted[1].rank == 0);  // the other host's rank is not this host's to answer
}

}  // namespace
}  // namespace ard::jobs
