#include "daemon/jobs/steady_state.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cmath>
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
using negotiation::RankEntry;
using negotiation::ReadyTensor;
using negotiation::Response;
using negotiation::TensorRequest;

TensorRequest Request(int rank, const std::string& name) {
  TensorRequest r;
  r.rank = rank;
  r.meta.collective = static_cast<uint32_t>(wire::Collective::kAllreduce);
  r.meta.dtype = static_cast<uint32_t>(wire::DataType::kFloat32);
  r.meta.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kSum);
  r.meta.prescale = r.meta.postscale = 1.0;
  r.meta.ndims = 1;
  r.meta.shape[0] = 1;
  r.meta.bytes = 4;
  r.meta.group_id = -1;
  std::strncpy(r.meta.name, name.c_str(), sizeof(r.meta.name) - 1);
  return r;
}

// `n` hosts (rank h on host h), each with its SteadyState over a real loopback mesh; the rounds
// carry allreduces of up to `carry` bytes; a vote waits up to `partial_wait` for partly submitted
// tensors.
struct Pair {
  explicit Pair(int n = 2, uint64_t carry = 0, absl::Duration partial_wait = absl::ZeroDuration())
      : n(n),
        hosts(n),
        meshes(dataplane::tcp::testing::ConnectOrDie(hosts, 77 + n)),
        wakeup(n),
        central(n),
        waits(n),
        waits_ran_out(n),
        run(n) {
    for (int h = 0; h < n; ++h) {
      std::vector<bool> here(n, false);
      here[h] = true;
      steady.push_back(std::make_unique<SteadyState>(
          here, 1 << 20, [this, h] { return meshes[h].get(); },
          [this, h](std::vector<ReadyTensor> tensors) {
            absl::MutexLock lock(&mu);
            for (auto& t : tensors) central[h].push_back(t.name);
          },
          carry, PartialWait{partial_wait, [this, h](bool ran_out) {
                               absl::MutexLock lock(&mu);
                               ++waits[h];
                               waits_ran_out[h] += ran_out;
                             }}));
      wakeup[h] = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    }
  }
  ~Pair() {
    for (int fd : wakeup) ::close(fd);
  }
  CommittedList List(const std::string& name, uint32_t id) { return List(Request(0, name), id); }
  CommittedList List(const TensorRequest& request, uint32_t id) {
    CommittedList list;
    Response r;
    ReadyTensor t{request.name(), std::vector<RankEntry>(n)};
    for (int rank = 0; rank < n; ++rank) {
      t.ranks[rank] = request;
      t.ranks[rank]->rank = rank;
    }
    r.tensors.push_back(std::move(t));
    list.responses.push_back(std::move(r));
    list.cache_put.push_back({id, request.name()});
    return list;
  }
  ReadyTensor Local(int h, const std::string& name) {
    ReadyTensor t{name, std::vector<RankEntry>(n)};
    t.ranks[h] = Request(h, name);
    return t;
  }
  // Every host waits for a round (some host changed something; the others are woken by its
  // messages) and runs it; returns each host's released tensor names (`run` keeps the responses).
  std::vector<std::string> Round() {
    std::vector<std::string> names(n);
    REQUIRE(dataplane::tcp::AllOk(RunOnHosts(n, [&](int h) -> absl::Status {
      // A wake-up left from a change the last round already took answers false once; the
      // executor then waits again, as here.
      absl::StatusOr<bool> due = false;
      for (int tries = 0; tries < 3 && due.ok() && !*due; ++tries) {
        due = steady[h]->AwaitRound(wakeup[h], absl::Seconds(10));
      }
      if (!due.ok()) return due.status();
      if (!*due) return absl::DeadlineExceededError("no round came");
      auto released = steady[h]->RunRound();
      if (!released.ok()) return released.status();
      for (const Response& r : *released) {
        for (const ReadyTensor& t : r.tensors) names[h] += t.name + ";";
      }
      run[h] = *std::move(released);
      return absl::OkStatus();
    })));
    return names;
  }

  const int n;
  LocalHosts hosts;
  dataplane::tcp::testing::Meshes meshes;
  std::vector<std::unique_ptr<SteadyState>> steady;
  std::vector<int> wakeup;
  absl::Mutex mu;
  std::vector<std::vector<std::string>> central;
  std::vector<int> waits;  // the votes each host delayed for partly submitted tensors
  std::vector<int> waits_ran_out;
  std::vector<std::vector<Response>> run;
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

TEST_CASE(
    "small cached allreduces travel in the round: every host gets the same bits, no allreduce") {
  for (int n : {3, 5}) {
    INFO(n << " hosts");
    Pair p(n, /*carry=*/1024);
    TensorRequest small = Request(0, "small");  // 3 floats, prescaled: carried
    small.meta.shape[0] = 3;
    small.meta.bytes = 12;
    small.meta.prescale = 0.5;
    TensorRequest big = Request(0, "big");  // 257 floats: over the limit
    big.meta.shape[0] = 257;
    big.meta.bytes = 257 * 4;
    for (int h = 0; h < n; ++h) {
      CommittedList first = p.List(small, 1), second = p.List(big, 2);
      REQUIRE(p.steady[h]->Received(first));
      REQUIRE(p.steady[h]->Received(second));
    }
    p.Round();
    std::vector<std::vector<float>> input(n);
    for (int h = 0; h < n; ++h) {
      // Sums that rounding would change with the order: 1e8 + 1 + ... (prescale 0.5 first).
      input[h] = std::vector<float>(257, 1.0f + h);
      input[h][0] = h == 0 ? 2e8f : 2.0f;
      for (const TensorRequest* request : {&small, &big}) {
        ReadyTensor t{request->name(), std::vector<RankEntry>(n)};
        t.ranks[h] = *request;
        t.ranks[h]->rank = h;
        t.ranks[h]->input.data = reinterpret_cast<const uint8_t*>(input[h].data());
        t.ranks[h]->input.bytes = request->meta.bytes;
        REQUIRE(p.steady[h]->Offer(t));
      }
    }
    CHECK(p.Round() == std::vector<std::string>(n, "small;big;"));
    for (int h = 0; h < n; ++h) {
      REQUIRE(p.run[h].size() == 2);
      REQUIRE(p.run[h][0].reduced.size() == 1);
      CHECK(p.run[h][0].reduced[0] == p.run[0][0].reduced[0]);  // bit-identical
      CHECK(p.run[h][1].reduced.empty());                       // big runs an allreduce of its own
      CHECK(p.steady[h]->carried_tensors() == 1);
      CHECK(p.steady[h]->agreed_tensors() == 2);
    }
    std::vector<float> sum(3);
    std::memcpy(sum.data(), p.run[0][0].reduced[0].data(), 12);
    float ones = 0;  // host h's elements 1, 2: (1 + h) / 2
    for (int h = 0; h < n; ++h) ones += 0.5f * (1.0f + h);
    CHECK(sum[1] == ones);
    CHECK(sum[2] == ones);
    CHECK(std::abs(sum[0] - 1e8f) < 64);
  }
}

TEST_CASE("a host whose other rank submits a moment later votes ready in its peer's round") {
  Pair p(2, 0, absl::Seconds(60));  // a bound that never passes here
  for (int h = 0; h < 2; ++h) {
    CommittedList list = p.List("a", 1);
    REQUIRE(p.steady[h]->Received(list));
  }
  CHECK(p.Round() == std::vector<std::string>{"a;", "a;"});
  p.steady[1]->SubmittedPartly("a");  // one of host 1's ranks submitted it
  ReadyTensor a0 = p.Local(0, "a");
  REQUIRE(p.steady[0]->Offer(a0));  // host 0 starts a round
  auto released = std::async(std::launch::async, [&] { return p.Round(); });
  // Host 1's other rank, before or while host 1 waits to vote: either way it votes ready.
  ReadyTensor a1 = p.Local(1, "a");
  REQUIRE(p.steady[1]->Offer(a1));
  CHECK(released.get() == std::vector<std::string>{"a;", "a;"});
  CHECK(p.steady[0]->rounds() == 2);
  CHECK(p.steady[1]->agreed_tensors() == 1);
  absl::MutexLock lock(&p.mu);
  CHECK(p.waits_ran_out[1] == 0);
}

TEST_CASE("a partly submitted tensor that is never offered costs one bounded wait") {
  Pair p(2, 0, absl::Milliseconds(1));
  for (int h = 0; h < 2; ++h) {
    CommittedList list = p.List("a", 1);
    REQUIRE(p.steady[h]->Received(list));
  }
  CHECK(p.Round() == std::vector<std::string>{"a;", "a;"});
  p.steady[1]->SubmittedPartly("a");  // host 1's other rank never submits it
  ReadyTensor a0 = p.Local(0, "a");
  REQUIRE(p.steady[0]->Offer(a0));
  CHECK(p.Round() == std::vector<std::string>{"", ""});
  {
    absl::MutexLock lock(&p.mu);
    CHECK(p.waits == std::vector<int>{0, 1});
    CHECK(p.waits_ran_out == std::vector<int>{0, 1});
  }
  for (int h = 0; h < 2; ++h) {  // the next round (a coordinator list) does not wait again
    CommittedList list = p.List("b", 2);
    REQUIRE(p.steady[h]->Received(list));
  }
  CHECK(p.Round() == std::vector<std::string>{"b;", "b;"});
  absl::MutexLock lock(&p.mu);
  CHECK(p.waits == std::vector<int>{0, 1});
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
