#include "daemon/jobs/steady_state.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "catch2/catch.hpp"
#include "daemon/dataplane/tcp/collectives_test_util.h"

namespace ard::jobs {
namespace {

using dataplane::tcp::LocalHosts;
using dataplane::tcp::RunOnHosts;
using negotiation::CommittedList;
using negotiation::ReadyTensor;
using negotiation::Response;
using negotiation::TensorRequest;

TensorRequest Request(int rank, const std::string& name) {
  TensorRequest r;
  r.rank = rank;
  r.meta.collective = static_cast<uint32_t>(wire::Collective::kAllreduce);
  r.meta.dtype = static_cast<uint32_t>(wire::DataType::kFloat32);
  r.meta.prescale = r.meta.postscale = 1.0;
  r.meta.ndims = 1;
  r.meta.shape[0] = 1;
  r.meta.bytes = 4;
  r.meta.group_id = -1;
  std::strncpy(r.meta.name, name.c_str(), sizeof(r.meta.name) - 1);
  return r;
}

// Two hosts (rank h on host h), each with its SteadyState over a real loopback mesh.
struct Pair {
  Pair() : hosts(2), meshes(dataplane::tcp::testing::ConnectOrDie(hosts, 77)) {
    for (int h = 0; h < 2; ++h) {
      std::vector<bool> here(2, false);
      here[h] = true;
      steady.push_back(std::make_unique<SteadyState>(
          here, 1 << 20, [this, h] { return meshes[h].get(); },
          [this, h](std::vector<ReadyTensor> tensors) {
            absl::MutexLock lock(&mu);
            for (auto& t : tensors) central[h].push_back(t.name);
          }));
      wakeup[h] = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    }
  }
  ~Pair() {
    for (int fd : wakeup) ::close(fd);
  }
  CommittedList List(const std::string& name, uint32_t id) {
    CommittedList list;
    Response r;
    r.tensors.push_back(ReadyTensor{name, {Request(0, name), Request(1, name)}});
    list.responses.push_back(std::move(r));
    list.cache_put.push_back({id, name});
    return list;
  }
  ReadyTensor Local(int h, const std::string& name) {
    ReadyTensor t{name, std::vector<std::optional<TensorRequest>>(2)};
    t.ranks[h] = Request(h, name);
    return t;
  }
  // Both hosts wait for a round (host 0 changed something; host 1 is woken by its message) and
  // run it; returns each host's released tensor names.
  std::vector<std::string> Round() {
    std::vector<std::string> names(2);
    REQUIRE(dataplane::tcp::AllOk(RunOnHosts(2, [&](int h) -> absl::Status {
      auto due = steady[h]->AwaitRound(wakeup[h], absl::Seconds(10));
      if (!due.ok()) return due.status();
      if (!*due) return absl::DeadlineExceededError("no round came");
      auto run = steady[h]->RunRound();
      if (!run.ok()) return run.status();
      for (const Response& r : *run) {
        for (const ReadyTensor& t : r.tensors) names[h] += t.name + ";";
      }
      return absl::OkStatus();
    })));
    return names;
  }

  LocalHosts hosts;
  dataplane::tcp::testing::Meshes meshes;
  std::vector<std::unique_ptr<SteadyState>> steady;
  int wakeup[2];
  absl::Mutex mu;
  std::vector<std::string> central[2];
};

TEST_CASE("a change on one host starts a round that wakes the idle other; cached tensors agree") {
  Pair p;
  CommittedList first = p.List("a", 1);
  REQUIRE(p.steady[0]->Received(first));  // host 1 gets it later
  auto released = std::async(std::launch::async, [&] { return p.Round(); });
  absl::SleepFor(absl::Milliseconds(50));
  CommittedList late = p.List("a", 1);
  REQUIRE(p.steady[1]->Received(late));  // the round waits for list 1 on host 1
  CHECK(released.get() == std::vector<std::string>{"a;", "a;"});
  for (int h = 0; h < 2; ++h) {
    ReadyTensor t = p.Local(h, "a");
    REQUIRE(p.steady[h]->Offer(t));
  }
  CHECK(p.Round() == std::vector<std::string>{"a;", "a;"});
  CHECK(p.steady[0]->agreed_tensors() == 1);
  CHECK(p.steady[1]->rounds() == 2);
}

TEST_CASE("a peer that closes during a round ends the rounds there; held tensors go central") {
  Pair p;
  for (int h = 0; h < 2; ++h) {
    CommittedList list = p.List("a", 1);
    REQUIRE(p.steady[h]->Received(list));
  }
  CHECK(p.Round() == std::vector<std::string>{"a;", "a;"});
  ReadyTensor a0 = p.Local(0, "a");
  REQUIRE(p.steady[0]->Offer(a0));
  p.meshes[1].reset();  // host 1's job ended (or its daemon died)
  auto due = p.steady[0]->AwaitRound(p.wakeup[0], absl::Seconds(5));
  REQUIRE(due.ok());
  REQUIRE(*due);
  auto run = p.steady[0]->RunRound();
  REQUIRE(run.ok());  // no failure of its own: the coordinator tells what happened
  CHECK(run->empty());
  CHECK_FALSE(p.steady[0]->active());
  {
    absl::MutexLock lock(&p.mu);
    CHECK(p.central[0] == std::vector<std::string>{"a"});
  }
  ReadyTensor again = p.Local(0, "a");
  CHECK_FALSE(p.steady[0]->Offer(again));
  CommittedList later = p.List("b", 2);
  CHECK_FALSE(p.steady[0]->Received(later));
}

TEST_CASE("Abort makes a round waiting for the coordinator's lists return") {
  Pair p;
  CommittedList list = p.List("a", 1);
  REQUIRE(p.steady[0]->Received(list));  // host 1 never gets it
  std::thread abort([&] {
    absl::SleepFor(absl::Milliseconds(200));
    p.steady[1]->Abort(absl::AbortedError("job failed"));
  });
  std::vector<absl::Status> statuses = RunOnHosts(2, [&](int h) -> absl::Status {
    auto due = p.steady[h]->AwaitRound(p.wakeup[h], absl::Seconds(10));
    if (!due.ok()) return due.status();
    return p.steady[h]->RunRound().status();
  });
  abort.join();
  CHECK(statuses[0].ok());
  CHECK(statuses[1].code() == absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace ard::jobs
