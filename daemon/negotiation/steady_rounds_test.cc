#include "daemon/negotiation/steady_rounds.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "catch2/catch.hpp"
#include "daemon/negotiation/steady_rounds_test_util.h"

namespace ard::negotiation::testing {
namespace {

TEST_CASE("carried slots: small non-Adasum allreduces, laid out from the slot table alone") {
  Job job(2, /*carry=*/1024);
  const std::vector<TensorRequest> tensors = {
      Meta("f", DataType::kFloat32, ReduceOp::kSum, 1),      // carried at 0
      Meta("big", DataType::kFloat32, ReduceOp::kSum, 257),  // 1028 bytes: over the limit
      Meta("ada", DataType::kFloat32, ReduceOp::kAdasum, 2),
      Meta("i", DataType::kInt32, ReduceOp::kMin, 3),          // at 8: an 8-byte boundary
      Meta("edge", DataType::kFloat64, ReduceOp::kMax, 128)};  // 1024 bytes: carried, at 24
  for (auto& h : job.host) h.Received(job.ListOf(tensors));
  job.Round();
  for (auto& h : job.host) REQUIRE(h.TakeOutcome());
  for (auto& h : job.host) {
    RoundVote v = h.Vote(kFusion);
    const std::vector<CarriedSlot>& c = h.carried();
    REQUIRE(c.size() == 3);
    CHECK((c[0].slot == 0 && c[0].offset == 0 && c[0].bytes == 4));
    CHECK((c[1].slot == 3 && c[1].offset == 8 && c[1].bytes == 12));
    CHECK((c[1].dtype == DataType::kInt32 && c[1].op == ReduceOp::kMin));
    CHECK((c[2].slot == 4 && c[2].offset == 24 && c[2].bytes == 1024));
    CHECK(v.data == std::vector<uint8_t>(1048, 0));  // nothing held
    CHECK(VoteBytes(v.slots, v.data.size()) == 6 * 8 + 2 * 8 + 1048);
  }
  // The regions stop at kMaxRoundDataBytes: 16 tensors of 1 KiB fit, the rest never travel.
  Job many(2, /*carry=*/1024);
  std::vector<TensorRequest> kib;
  for (int i = 0; i < 18; ++i) {
    kib.push_back(Meta("k" + std::to_string(i), DataType::kFloat32, ReduceOp::kSum, 256));
  }
  kib.push_back(Meta("small", DataType::kFloat32, ReduceOp::kSum, 1));
  for (auto& h : many.host) h.Received(many.ListOf(kib));
  many.Round();
  for (auto& h : many.host) REQUIRE(h.TakeOutcome());
  CHECK(many.host[0].Vote(kFusion).data.size() == kMaxRoundDataBytes);
  CHECK(many.host[0].carried().size() == 16);
  CHECK(many.host[0].carried().back().slot == 15);
  // Off (0): nothing is carried.
  Job off(2);
  for (auto& h : off.host) h.Received(off.ListOf(tensors));
  off.Round();
  for (auto& h : off.host) REQUIRE(h.TakeOutcome());
  CHECK(off.host[0].Vote(kFusion).data.empty());
  CHECK(off.host[0].carried().empty());
}

TEST_CASE("carried tensors every host holds run with the round's reduction, before the others") {
  Job job(3, /*carry=*/1024);
  const std::vector<TensorRequest> tensors = {Meta("i", DataType::kInt32, ReduceOp::kSum, 2),
                                              Meta("big", DataType::kFloat32, ReduceOp::kSum, 300),
                                              Meta("f", DataType::kFloat32, ReduceOp::kAverage, 1)};
  for (auto& h : job.host) h.Received(job.ListOf(tensors));
  job.Round();
  for (auto& h : job.host) REQUIRE(Names(h.TakeOutcome()->run) == "i|big|f");
  std::vector<std::vector<int32_t>> ints(3);
  for (int h = 0; h < 3; ++h) {
    ints[h] = {h + 1, -1000 * (h + 1)};
    ReadyTensor i = job.Local(h, tensors[0], ints[h].data());
    ReadyTensor big = job.Local(h, tensors[1], job.input[h].data());
    ReadyTensor f = job.Local(h, tensors[2], job.input[h].data());
    REQUIRE(job.host[h].Offer(f));
    REQUIRE(job.host[h].Offer(big));
    REQUIRE(job.host[h].Offer(i));
  }
  RoundVote result = job.Round();
  CHECK(result.data.size() == 16);
  for (auto& h : job.host) {
    auto out = h.TakeOutcome();
    REQUIRE(out);
    CHECK(Names(out->run) == "i,f|big");  // carried first (slot order), then the fused others
    CHECK(out->agreed_tensors == 3);
    CHECK(out->carried_tensors == 2);
    REQUIRE(out->run[0].reduced.size() == 2);
    std::vector<int32_t> i(2);
    REQUIRE(out->run[0].reduced[0].size() == 8);
    std::memcpy(i.data(), out->run[0].reduced[0].data(), 8);
    CHECK(i == std::vector<int32_t>{6, -6000});
    float f;
    REQUIRE(out->run[0].reduced[1].size() == 4);
    std::memcpy(&f, out->run[0].reduced[1].data(), 4);
    CHECK(f == 6.0f);  // the sum: Average's division is the data plane's, with the postscale
    CHECK(out->run[1].reduced.empty());
  }
}

TEST_CASE("a carried tensor some host does not hold is not reduced and runs later") {
  Job job(2, /*carry=*/1024);
  const TensorRequest i = Meta("i", DataType::kInt32, ReduceOp::kSum, 1);
  for (auto& h : job.host) h.Received(job.ListOf({i}));
  job.Round();
  for (auto& h : job.host) REQUIRE(h.TakeOutcome());
  const int32_t big = INT32_MAX;
  ReadyTensor i0 = job.Local(0, i, &big);
  REQUIRE(job.host[0].Offer(i0));
  RoundVote result = job.Round();
  CHECK(result.ready[0] == 0);
  CHECK(result.data == std::vector<uint8_t>(8, 0));
  for (auto& h : job.host) CHECK(h.TakeOutcome()->run.empty());
  const int32_t one = 1;
  ReadyTensor i1 = job.Local(1, i, &one);
  REQUIRE(job.host[1].Offer(i1));
  job.Round();
  for (auto& h : job.host) {
    auto out = h.TakeOutcome();
    REQUIRE(out->run.size() == 1);
    int32_t sum;
    std::memcpy(&sum, out->run[0].reduced.at(0).data(), 4);
    CHECK(sum == INT32_MIN);  // wraps, as the kernels define
  }
}

TEST_CASE("cached tensors every host offered run fused in slot order, whatever the arrival order") {
  Job job = CachedAbc();
  for (const char* name : {"c", "a", "b"}) {
    ReadyTensor t = job.Local(0, name);
    REQUIRE(job.host[0].Offer(t));
  }
  for (const char* name : {"b", "c", "a"}) {
    ReadyTensor t = job.Local(1, name);
    REQUIRE(job.host[1].Offer(t));
  }
  job.Round();
  for (int h = 0; h < 2; ++h) {
    auto out = job.host[h].TakeOutcome();
    REQUIRE(out);
    CHECK(Names(out->run) == "a,b,c");
    CHECK(out->agreed_tensors == 3);
    CHECK(out->to_coordinator.empty());
    // An allreduce: this host's rank's entry (its own request, with its inputs) and rank 0's.
    REQUIRE(out->run[0].tensors[0].ranks[h]);
    CHECK(out->run[0].tensors[0].ranks[h]->request_id == 1000u + h);
    CHECK(out->run[0].tensors[0].ranks[0]);
  }
}

// Host 0 runs ranks 0 and 1 of a job of `size` ranks, host 1 the others. "a" is an allreduce,
// "g" an allgather, both cached and offered by both hosts; one round agrees both.
TEST_CASE("a host's templates and agreed allreduces hold only its own ranks' entries") {
  for (int size : {4, 64, 1000}) {
    INFO("ranks " << size);
    std::vector<int> host_of_rank(size, 1);
    host_of_rank[0] = host_of_rank[1] = 0;
    Job job(host_of_rank);
    for (auto& h : job.host) {
      CommittedList list = job.List({"a"}, {{1, "a"}});
      CommittedList gather = job.List({"g"}, {{2, "g"}}, {}, 1, wire::Collective::kAllgather);
      list.responses.push_back(std::move(gather.responses[0]));
      list.cache_put.push_back(gather.cache_put[0]);
      h.Received(std::move(list));
    }
    job.Round();
    for (auto& h : job.host) REQUIRE(Names(h.TakeOutcome()->run) == "a|g");
    // The allreduce's template: the local ranks' metadata and rank 0's, whatever the job's
    // size; the allgather's: the local ranks' and a copy of every rank's (it reads them all).
    CHECK(job.host[0].template_rank_entries() == static_cast<size_t>(2 + 2 + size));
    CHECK(job.host[1].template_rank_entries() ==
          static_cast<size_t>((size - 1) + (size - 2) + size));
    for (int h = 0; h < 2; ++h) {
      ReadyTensor a = job.Local(h, "a");
      ReadyTensor g = job.Local(h, "g", 1, wire::Collective::kAllgather);
      REQUIRE(job.host[h].Offer(a));
      REQUIRE(job.host[h].Offer(g));
    }
    job.Round();
    for (int h = 0; h < 2; ++h) {
      auto out = job.host[h].TakeOutcome();
      REQUIRE(out);
      REQUIRE(Names(out->run) == "a|g");
      const ReadyTensor& a = out->run[0].tensors[0];
      const ReadyTensor& g = out->run[1].tensors[0];
      CHECK(out->run[0].collective == wire::Collective::kAllreduce);
      CHECK(out->run[1].collective == wire::Collective::kAllgather);
      REQUIRE(a.ranks.size() == static_cast<size_t>(size));
      REQUIRE(g.ranks.size() == static_cast<size_t>(size));
      for (int r = 0; r < size; ++r) {
        const bool mine = job.host_of_rank[r] == h;
        CHECK(a.ranks[r].has_value() == (mine || r == 0));
        if (r == 0) CHECK(a.ranks[r]->rank == 0);
        REQUIRE(g.ranks[r]);  // every rank's rows
        CHECK(g.ranks[r]->rank == r);
        if (mine) {
          CHECK(a.ranks[r]->request_id == 1000u + r);
          CHECK(g.ranks[r]->request_id == 1000u + r);
        } else {
          CHECK(g.ranks[r]->request_id == 0);
        }
      }
    }
  }
}

// A committed list is held until a round releases it: an allreduce keeps only this host's
// ranks' entries and rank 0's from its arrival on (what this host runs); an allgather, which
// reads every rank's rows, keeps every rank's; a tensor a rank joined keeps what it has.
TEST_CASE("a received list's tensors hold only what this host runs until a round releases them") {
  const int size = 64;
  std::vector<int> host_of_rank(size, 1);
  host_of_rank[0] = host_of_rank[1] = 0;
  Job job(host_of_rank);
  for (auto& h : job.host) {
    CommittedList list = job.List({"a", "j"}, {{1, "a"}, {3, "j"}});
    list.responses[1].tensors[0].ranks[5].reset();  // rank 5 joined
    CommittedList gather = job.List({"g"}, {{2, "g"}}, {}, 1, wire::Collective::kAllgather);
    list.responses.push_back(std::move(gather.responses[0]));
    list.cache_put.push_back(gather.cache_put[0]);
    h.Received(std::move(list));
  }
  job.Round();
  for (int h = 0; h < 2; ++h) {
    auto out = job.host[h].TakeOutcome();
    REQUIRE(out);
    REQUIRE(Names(out->run) == "a|j|g");
    const ReadyTensor& a = out->run[0].tensors[0];
    const ReadyTensor& j = out->run[1].tensors[0];
    const ReadyTensor& g = out->run[2].tensors[0];
    REQUIRE(a.ranks.size() == static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) {
      CHECK(a.ranks[r].has_value() == (job.host_of_rank[r] == h || r == 0));
      CHECK(j.ranks[r].has_value() == (r != 5));
      CHECK(g.ranks[r].has_value());
    }
    CHECK(a.first().rank == 0);
  }
  // "a" and "g" are cached as before; "j" (a rank joined) is not.
  CHECK(job.host[0].template_rank_entries() == static_cast<size_t>(2 + 2 + size));
  for (int h = 0; h < 2; ++h) {
    ReadyTensor a = job.Local(h, "a");
    ReadyTensor j = job.Local(h, "j");
    CHECK(job.host[h].Offer(a));
    CHECK_FALSE(job.host[h].Offer(j));
  }
}

TEST_CASE("a scale that differs from the committed one in a zero's sign is negotiated centrally") {
  Job job(2);
  for (auto& h : job.host) {
    CommittedList list = job.List({"a"}, {{1, "a"}});
    for (auto& q : list.responses[0].tensors[0].ranks) q->meta.postscale = 0.0;
    h.Received(std::move(list));
  }
  job.Round();
  for (auto& h : job.host) REQUIRE(h.TakeOutcome());
  ReadyTensor a = job.Local(0, "a");
  a.ranks[0]->meta.postscale = -0.0;  // == 0.0, but the result's zeros would differ in sign
  CHECK_FALSE(job.host[0].Offer(a));
  ReadyTensor b = job.Local(1, "a");
  b.ranks[1]->meta.postscale = 0.0;
  CHECK(job.host[1].Offer(b));
}

// Validation accepts ranks whose scales are equal but for a zero's sign; every host must then
// scale as the committed response's first rank does, not each with its own ranks' value.
TEST_CASE("ranks whose scales differ in a zero's sign run with the first rank's, on every host") {
  Job job(2);
  for (auto& h : job.host) {
    CommittedList list = job.List({"a"}, {{1, "a"}});
    list.responses[0].tensors[0].ranks[0]->meta.prescale = 0.0;
    list.responses[0].tensors[0].ranks[1]->meta.prescale = -0.0;
    h.Received(std::move(list));
  }
  job.Round();
  for (auto& h : job.host) REQUIRE(h.TakeOutcome());
  CHECK(job.host[1].template_rank_entries() == 1 + 1);
  for (int h = 0; h < 2; ++h) {
    ReadyTensor t = job.Local(h, "a");
    t.ranks[h]->meta.prescale = h == 0 ? 0.0 : -0.0;
    REQUIRE(job.host[h].Offer(t));
  }
  job.Round();
  for (int h = 0; h < 2; ++h) {
    auto out = job.host[h].TakeOutcome();
    REQUIRE(out);
    REQUIRE(Names(out->run) == "a");
    const ReadyTensor& a = out->run[0].tensors[0];
    CHECK_FALSE(std::signbit(a.first().meta.prescale));  // rank 0's, on both hosts
    REQUIRE(a.ranks[h]);
    CHECK(a.ranks[h]->request_id == 1000u + h);
  }
}

TEST_CASE("a tensor runs only once every host offered it") {
  Job job = CachedAbc();
  ReadyTensor a0 = job.Local(0, "a");
  REQUIRE(job.host[0].Offer(a0));
  CHECK(job.host[0].changed());
  CHECK_FALSE(job.host[1].changed());
  job.Round();
  for (auto& h : job.host) CHECK(h.TakeOutcome()->run.empty());
  CHECK(job.host[0].held() == 1);
  ReadyTensor a1 = job.Local(1, "a");
  REQUIRE(job.host[1].Offer(a1));
  job.Round();
  for (auto& h : job.host) CHECK(Names(h.TakeOutcome()->run) == "a");
  CHECK(job.host[0].held() == 0);
}

TEST_CASE("a coordinator list runs at the same place on every host, however late it arrives") {
  Job job = CachedAbc();
  job.host[0].Received(job.List({"x"}));  // host 1 has not received it yet
  for (int h = 0; h < 2; ++h) {
    ReadyTensor a = job.Local(h, "a");
    REQUIRE(job.host[h].Offer(a));
  }
  RoundVote result = job.Round();
  CHECK(result.lists == 2);
  CHECK_FALSE(job.host[1].TakeOutcome());  // waits for list 2
  CHECK(job.host[1].applying());
  job.host[1].Received(job.List({"x"}));
  for (auto& h : job.host) CHECK(Names(h.TakeOutcome()->run) == "x|a");
}

TEST_CASE("a host whose metadata changed makes every host negotiate that tensor centrally") {
  Job job = CachedAbc();
  ReadyTensor a0 = job.Local(0, "a");
  REQUIRE(job.host[0].Offer(a0));
  ReadyTensor a1 = job.Local(1, "a", /*elements=*/2);
  REQUIRE_FALSE(job.host[1].Offer(a1));  // the caller sends it to the coordinator
  job.Round();
  auto out0 = job.host[0].TakeOutcome();
  CHECK(out0->run.empty());
  REQUIRE(out0->to_coordinator.size() == 1);
  CHECK(out0->to_coordinator[0].ranks[0]->request_id == 1000u);
  CHECK(job.host[1].TakeOutcome()->to_coordinator.empty());
  // Until the coordinator commits it, a late offer goes there too.
  ReadyTensor b0 = job.Local(0, "b");
  CHECK(job.host[0].Offer(b0));
}

TEST_CASE("a pending join sends every cached tensor to the coordinator") {
  Job job = CachedAbc();
  ReadyTensor a0 = job.Local(0, "a");
  REQUIRE(job.host[0].Offer(a0));
  job.host[1].SetJoinPending(true);
  CHECK(job.host[1].changed());
  job.Round();
  CHECK(job.host[0].TakeOutcome()->to_coordinator.size() == 1);
  job.host[1].TakeOutcome();
  ReadyTensor b0 = job.Local(0, "b");
  CHECK_FALSE(job.host[0].Offer(b0));
}

TEST_CASE("an evicted entry's held tensor goes to the coordinator; slots are reused") {
  Job job = CachedAbc();
  ReadyTensor a0 = job.Local(0, "a");
  REQUIRE(job.host[0].Offer(a0));
  for (auto& h : job.host) h.Received(job.List({"d"}, {{4, "d"}}, {1}));
  job.Round();
  auto out0 = job.host[0].TakeOutcome();
  CHECK(Names(out0->run) == "d");
  CHECK(out0->to_coordinator.size() == 1);
  job.host[1].TakeOutcome();
  // d took a's slot (0) on both hosts: the next round votes on 3 slots.
  for (int h = 0; h < 2; ++h) {
    ReadyTensor d = job.Local(h, "d");
    REQUIRE(job.host[h].Offer(d));
  }
  RoundVote result = job.Round();
  CHECK(result.slots == 3);
  CHECK(result.ready[0] == 1);
}

TEST_CASE("votes of different rounds are a broken invariant") {
  Job job = CachedAbc();
  RoundVote v0 = job.host[0].Vote(kFusion);
  job.host[0].Vote(kFusion);  // host 0 is one round ahead
  RoundVote v1 = job.host[1].Vote(kFusion);
  CombineVotes(v1, v0);
  CHECK(job.host[1].Agreed(v1).ok());
  RoundVote v0b = job.host[0].Vote(kFusion);
  CombineVotes(v0b, v1);
  CHECK(job.host[0].Agreed(v0b).code() == absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace ard::negotiation::testing
