#include "daemon/negotiation/steady_rounds.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <type_traits>

#include "catch2/catch.hpp"

namespace ard::negotiation {
namespace {

using wire::DataType;
using wire::ReduceOp;

constexpr uint64_t kFusion = 1 << 20;

// The data plane's reduction for the dtypes and ops these tests carry (the production reducer
// wraps the reduce kernels; negotiation/ never includes them): sums wrap as unsigned, and min and
// max keep the left operand of equal ones. A host's partial is its first rank's input.
class TestReducer : public RoundReducer {
 public:
  bool Reduces(DataType dtype, ReduceOp op) const override {
    return dtype == DataType::kFloat32 || dtype == DataType::kFloat64 || dtype == DataType::kInt32;
  }
  void ReduceInto(uint8_t* into, const uint8_t* from, size_t count, DataType dtype,
                  ReduceOp op) const override {
    if (dtype == DataType::kFloat32) return Reduce<float>(into, from, count, op);
    if (dtype == DataType::kFloat64) return Reduce<double>(into, from, count, op);
    Reduce<int32_t>(into, from, count, op);
  }
  void Partial(const ReadyTensor& t, uint8_t* out) const override {
    std::memcpy(out, t.first().input.data, t.first().meta.bytes);
  }

 private:
  template <typename T>
  static void Reduce(uint8_t* into, const uint8_t* from, size_t count, ReduceOp op) {
    for (size_t i = 0; i < count; ++i) {
      T a, b;
      std::memcpy(&a, into + i * sizeof(T), sizeof(T));
      std::memcpy(&b, from + i * sizeof(T), sizeof(T));
      if (op == ReduceOp::kMin) {
        a = std::min(a, b);
      } else if (op == ReduceOp::kMax) {
        a = std::max(a, b);
      } else if constexpr (std::is_integral_v<T>) {
        a = static_cast<T>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
      } else {
        a = a + b;
      }
      std::memcpy(into + i * sizeof(T), &a, sizeof(T));
    }
  }
};

TensorRequest Request(int rank, const std::string& name, int64_t elements = 1) {
  TensorRequest r;
  r.rank = rank;
  r.meta.collective = static_cast<uint32_t>(wire::Collective::kAllreduce);
  r.meta.dtype = static_cast<uint32_t>(wire::DataType::kFloat32);
  r.meta.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kSum);
  r.meta.prescale = r.meta.postscale = 1.0;
  r.meta.ndims = 1;
  r.meta.shape[0] = elements;
  r.meta.bytes = 4 * elements;
  r.meta.group_id = -1;
  std::strncpy(r.meta.name, name.c_str(), sizeof(r.meta.name) - 1);
  return r;
}

std::vector<int> OneRankPerHost(int hosts) {
  std::vector<int> host_of_rank(hosts);
  for (int h = 0; h < hosts; ++h) host_of_rank[h] = h;
  return host_of_rank;
}

// A job whose rank r runs on host host_of_rank[r] (hosts numbered from 0). With `carry` > 0 the
// rounds carry allreduces of up to that many bytes; a host's partial is its first rank's input.
struct Job {
  explicit Job(int hosts, uint64_t carry = 0) : Job(OneRankPerHost(hosts), carry) {}
  explicit Job(std::vector<int> ranks_on, uint64_t carry = 0) : host_of_rank(std::move(ranks_on)) {
    const int hosts = *std::max_element(host_of_rank.begin(), host_of_rank.end()) + 1;
    input.resize(hosts);
    for (int h = 0; h < hosts; ++h) {
      std::vector<bool> here(size());
      for (int r = 0; r < size(); ++r) here[r] = host_of_rank[r] == h;
      RoundData data{carry, std::make_shared<TestReducer>()};
      host.emplace_back(here, carry > 0 ? data : RoundData{});
      input[h].assign(kInputBytes / 4, static_cast<float>(h + 1));
    }
  }
  int size() const { return static_cast<int>(host_of_rank.size()); }
  // Host h's ranks submitted `name` (with `elements` elements of input[h]).
  ReadyTensor Local(int h, const std::string& name, int64_t elements = 1,
                    wire::Collective collective = wire::Collective::kAllreduce) const {
    ReadyTensor t{name, std::vector<RankEntry>(size())};
    for (int r = 0; r < size(); ++r) {
      if (host_of_rank[r] != h) continue;
      t.ranks[r] = Request(r, name, elements);
      t.ranks[r]->meta.collective = static_cast<uint32_t>(collective);
      t.ranks[r]->request_id = 1000 + r;  // marks this host's own entry
      t.ranks[r]->input.data = reinterpret_cast<const uint8_t*>(input[h].data());
      t.ranks[r]->input.bytes = t.ranks[r]->meta.bytes;
    }
    return t;
  }
  // Host h's ranks submitted `request`'s tensor (its metadata; input as given).
  ReadyTensor Local(int h, TensorRequest request, const void* data) const {
    ReadyTensor t{request.name(), std::vector<RankEntry>(size())};
    request.rank = h;
    request.input.data = static_cast<const uint8_t*>(data);
    request.input.bytes = request.meta.bytes;
    t.ranks[h] = std::move(request);
    return t;
  }
  // A coordinator list committing `requests` (every rank), caching each under id 1, 2, ...
  CommittedList ListOf(const std::vector<TensorRequest>& requests) const {
    CommittedList list;
    for (const TensorRequest& request : requests) {
      Response r;
      ReadyTensor t{request.name(), std::vector<RankEntry>(size())};
      for (int rank = 0; rank < size(); ++rank) {
        t.ranks[rank] = request;
        t.ranks[rank]->rank = rank;
      }
      r.tensors.push_back(std::move(t));
      list.responses.push_back(std::move(r));
      list.cache_put.push_back({static_cast<uint32_t>(list.cache_put.size() + 1), request.name()});
    }
    return list;
  }
  // A coordinator list committing `names` (every rank), caching those given ids.
  CommittedList List(const std::vector<std::string>& names,
                     std::vector<std::pair<uint32_t, std::string>> put = {},
                     std::vector<uint32_t> evict = {}, int64_t elements = 1,
                     wire::Collective collective = wire::Collective::kAllreduce) const {
    CommittedList list;
    for (const std::string& name : names) {
      Response r;
      r.collective = collective;
      ReadyTensor t{name, std::vector<RankEntry>(size())};
      for (int rank = 0; rank < size(); ++rank) {
        t.ranks[rank] = Request(rank, name, elements);
        t.ranks[rank]->meta.collective = static_cast<uint32_t>(collective);
      }
      r.tensors.push_back(std::move(t));
      list.responses.push_back(std::move(r));
    }
    list.cache_put = std::move(put);
    list.cache_evict = std::move(evict);
    return list;
  }
  // Every host votes; the combined result goes to every host. Returns the result.
  RoundVote Round() {
    std::vector<RoundVote> votes;
    for (auto& h : host) votes.push_back(h.Vote(kFusion));
    RoundVote result = votes[0];
    for (size_t i = 1; i < votes.size(); ++i) {
      CombineVotes(result, votes[i], host[0].carried(), &reducer, /*mine_is_lower=*/true);
    }
    for (auto& h : host) REQUIRE(h.Agreed(result).ok());
    return result;
  }
  std::vector<int> host_of_rank;
  static constexpr size_t kInputBytes = 4096;
  std::vector<SteadyRounds> host;
  TestReducer reducer;
  std::vector<std::vector<float>> input;  // host h's inputs: h + 1 everywhere
};

// "a,b|c": one response per '|', tensor names joined by ','.
std::string Names(const std::vector<Response>& run) {
  std::string out;
  for (const Response& r : run) {
    if (!out.empty()) out += "|";
    for (size_t i = 0; i < r.tensors.size(); ++i) out += (i ? "," : "") + r.tensors[i].name;
  }
  return out;
}

// Both hosts cached a, b and c (list 1 released by a first round).
Job CachedAbc() {
  Job job(2);
  for (auto& h : job.host) h.Received(job.List({"a", "b", "c"}, {{1, "a"}, {2, "b"}, {3, "c"}}));
  job.Round();
  for (auto& h : job.host) REQUIRE(Names(h.TakeOutcome()->run) == "a|b|c");
  return job;
}

TEST_CASE("votes survive the wire and combine the same way in any order") {
  RoundVote a{7, 70, 3, kFusion, {0b101, 1}, {0b010, 0}, 7, 70};
  RoundVote b{7, 70, 5, 4096, {0b110, 1}, {0b001, 2}, 7, 70};
  std::vector<uint8_t> bytes(VoteBytes(70));
  EncodeVote(a, bytes.data());
  RoundVote back = DecodeVote(bytes.data(), 70);
  CHECK(back.ready == a.ready);
  CHECK(back.to_coordinator == a.to_coordinator);
  CHECK(back.lists == 3);
  RoundVote ab = a, ba = b;
  CombineVotes(ab, b);
  CombineVotes(ba, a);
  for (const RoundVote* v : {&ab, &ba}) {
    CHECK(v->ready == std::vector<uint64_t>{0b100, 1});
    CHECK(v->to_coordinator == std::vector<uint64_t>{0b011, 2});
    CHECK(v->lists == 5);
    CHECK(v->fusion_threshold_bytes == 4096);
  }
}

TensorRequest Meta(const std::string& name, wire::DataType dtype, wire::ReduceOp op,
                   int64_t elements) {
  TensorRequest r = Request(0, name, elements);
  r.meta.dtype = static_cast<uint32_t>(dtype);
  r.meta.reduce_op = static_cast<uint32_t>(op);
  r.meta.bytes = elements * wire::DataTypeSize(r.meta.dtype);
  return r;
}

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

// A vote on one carried slot of `c` with `value` in it, ready or not.
template <typename T>
RoundVote OneSlot(const CarriedSlot& c, bool ready, T value) {
  RoundVote v{1, 1, 0, kFusion, {ready ? 1u : 0u}, {0}, 1, 1};
  v.data.assign(8, 0xEE);
  std::memcpy(v.data.data() + c.offset, &value, sizeof(value));
  return v;
}

TEST_CASE("the combine reduces a slot's data only where both sides are ready, lower op higher") {
  const TestReducer reducer;
  const CarriedSlot ints{0, 0, 4, DataType::kInt32, ReduceOp::kSum};
  // A side that is not ready holds garbage: never reduced (INT32_MAX + anything), zeroed.
  for (bool mine_ready : {true, false}) {
    RoundVote mine = OneSlot(ints, mine_ready, INT32_MAX);
    RoundVote theirs = OneSlot(ints, !mine_ready, INT32_MAX);
    CombineVotes(mine, theirs, {ints}, &reducer, mine_ready);
    CHECK(mine.ready[0] == 0);
    CHECK(mine.data == std::vector<uint8_t>{0, 0, 0, 0, 0xEE, 0xEE, 0xEE, 0xEE});
  }
  RoundVote two = OneSlot(ints, true, int32_t{2});
  CombineVotes(two, OneSlot(ints, true, int32_t{3}), {ints}, &reducer, true);
  int32_t five;
  std::memcpy(&five, two.data.data(), 4);
  CHECK(five == 5);
  CHECK(two.ready[0] == 1);
  // min(-0, +0) keeps its first operand: the order shows in the bits. Whichever side combines,
  // the result is (lower op higher).
  const CarriedSlot floats{0, 0, 4, DataType::kFloat32, ReduceOp::kMin};
  const float lower = -0.0f, higher = +0.0f;
  float expected = lower, reversed = higher;
  reducer.ReduceInto(reinterpret_cast<uint8_t*>(&expected),
                     reinterpret_cast<const uint8_t*>(&higher), 1, DataType::kFloat32,
                     ReduceOp::kMin);
  reducer.ReduceInto(reinterpret_cast<uint8_t*>(&reversed),
                     reinterpret_cast<const uint8_t*>(&lower), 1, DataType::kFloat32,
                     ReduceOp::kMin);
  REQUIRE(std::memcmp(&expected, &reversed, 4) != 0);
  RoundVote at_lower = OneSlot(floats, true, lower), at_higher = OneSlot(floats, true, higher);
  const RoundVote from_lower = at_lower, from_higher = at_higher;
  CombineVotes(at_lower, from_higher, {floats}, &reducer, /*mine_is_lower=*/true);
  CombineVotes(at_higher, from_lower, {floats}, &reducer, /*mine_is_lower=*/false);
  CHECK(std::memcmp(at_lower.data.data(), &expected, 4) == 0);
  CHECK(std::memcmp(at_higher.data.data(), &expected, 4) == 0);
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

TEST_CASE("a partly submitted cached tensor is awaited until it is offered") {
  Job job = CachedAbc();
  SteadyRounds& h1 = job.host[1];
  CHECK(h1.awaited() == 0);
  h1.SubmittedPartly("a");
  h1.SubmittedPartly("a");  // another local rank: still one tensor
  h1.SubmittedPartly("x");  // not cached: it goes to the coordinator, nothing waits for it
  CHECK(h1.awaited() == 1);
  CHECK_FALSE(h1.changed());  // a partial submission is no reason for a round
  ReadyTensor a1 = job.Local(1, "a");
  REQUIRE(h1.Offer(a1));
  CHECK(h1.awaited() == 0);
  h1.SubmittedPartly("b");
  CHECK(h1.awaited() == 1);
  h1.TakeHeld();  // the rounds are over
  CHECK(h1.awaited() == 0);
}

TEST_CASE("a wait that ran out is not repeated for the same submission") {
  Job job = CachedAbc();
  SteadyRounds& h1 = job.host[1];
  h1.SubmittedPartly("a");
  h1.WaitedInVain();
  CHECK(h1.awaited() == 0);
  h1.SubmittedPartly("a");  // another local rank of the same submission
  h1.SubmittedPartly("b");  // a tensor partly submitted after the wait
  CHECK(h1.awaited() == 1);
  for (int h = 0; h < 2; ++h) {
    ReadyTensor a = job.Local(h, "a");
    REQUIRE(job.host[h].Offer(a));
  }
  job.Round();
  for (auto& h : job.host) REQUIRE(Names(h.TakeOutcome()->run) == "a");
  h1.SubmittedPartly("a");  // its next submission is awaited again
  CHECK(h1.awaited() == 2);
}

TEST_CASE("nothing is awaited that would not be voted ready: joins, central names, held slots") {
  Job job = CachedAbc();
  SteadyRounds& h1 = job.host[1];
  h1.SubmittedPartly("a");
  h1.SetJoinPending(true);
  CHECK(h1.awaited() == 0);
  h1.SetJoinPending(false);
  CHECK(h1.awaited() == 1);
  ReadyTensor b1 = job.Local(1, "b", /*elements=*/2);  // changed metadata: central
  REQUIRE_FALSE(h1.Offer(b1));
  h1.SubmittedPartly("b");
  CHECK(h1.awaited() == 1);
  ReadyTensor c1 = job.Local(1, "c");
  REQUIRE(h1.Offer(c1));
  h1.SubmittedPartly("c");  // its slot is taken until the held one runs
  CHECK(h1.awaited() == 1);
}

TEST_CASE("a vote after a wait is the vote the same state gives without one") {
  Job waited = CachedAbc();
  Job plain = CachedAbc();
  waited.host[0].SubmittedPartly("a");
  waited.host[0].SubmittedPartly("x");
  waited.host[0].WaitedInVain();
  waited.host[0].SubmittedPartly("b");
  for (Job* job : {&waited, &plain}) {
    ReadyTensor c0 = job->Local(0, "c");
    REQUIRE(job->host[0].Offer(c0));
  }
  RoundVote a = waited.host[0].Vote(kFusion);
  RoundVote b = plain.host[0].Vote(kFusion);
  std::vector<uint8_t> wire_a(VoteBytes(a.slots)), wire_b(VoteBytes(b.slots));
  EncodeVote(a, wire_a.data());
  EncodeVote(b, wire_b.data());
  CHECK(wire_a == wire_b);
}

// A small model of the job: each host's ranks submit the same tensors every step in their own
// order (t0's shape changes at step 2); a host's tensor can be submitted again once it ran there;
// the coordinator commits a tensor once every host sent it (caching it, or re-caching it under a
// new id when its shape changed) and its lists reach each host after a random delay; rounds run
// whenever some host changed. Every host must run the same sequence, and after the first step
// only t0's new shape reaches the coordinator (once from every host). Odd seeds carry the tensors'
// data in the rounds: each carried result is the sum of every host's input.
TEST_CASE(
    "random interleavings: every host runs the same sequence; steady steps skip the "
    "coordinator") {
  for (int seed = 0; seed < 40; ++seed) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    const int hosts = 2 + seed % 4;
    const std::vector<std::string> names = {"t0", "t1", "t2", "t3", "t4", "t5"};
    const int steps = 4;
    Job job(hosts, seed % 2 == 1 ? 1024 : 0);
    const float sum = hosts * (hosts + 1) / 2.0f;
    int carried = 0;
    std::vector<std::vector<std::string>> todo(hosts);  // still to submit (this step)
    std::vector<std::set<std::string>> running(hosts);  // submitted, not run yet
    std::vector<int> step(hosts, 0);
    std::vector<std::string> sequence(hosts);
    std::vector<std::deque<CommittedList>> inbox(hosts);
    std::map<std::string, std::set<int>> at_coordinator;
    std::map<std::string, std::pair<uint32_t, int64_t>> cached;  // name -> id, elements
    uint32_t next_id = 1;
    int central_after_first_step = 0;
    auto elements = [&](int h, const std::string& name) -> int64_t {
      return name == "t0" && step[h] >= 2 ? 2 : 1;
    };
    bool round_open = false;
    auto next_step = [&](int h) {
      todo[h] = names;
      std::shuffle(todo[h].begin(), todo[h].end(), rng);
    };
    for (int h = 0; h < hosts; ++h) next_step(h);
    auto to_coordinator = [&](int h, const std::string& name) {
      if (step[h] > 0) ++central_after_first_step;
      auto& from = at_coordinator[name];
      from.insert(h);
      if (static_cast<int>(from.size()) < hosts) return;
      at_coordinator.erase(name);
      const int64_t n = elements(h, name);  // every host is at the same shape here
      std::vector<std::pair<uint32_t, std::string>> put;
      std::vector<uint32_t> evict;
      auto entry = cached.find(name);
      if (entry == cached.end() || entry->second.second != n) {
        if (entry != cached.end()) evict.push_back(entry->second.first);
        cached[name] = {next_id, n};
        put.push_back({next_id++, name});
      }
      for (int g = 0; g < hosts; ++g) inbox[g].push_back(job.List({name}, put, evict, n));
    };
    for (int iteration = 0; iteration < 100000; ++iteration) {
      bool all_done = true;
      for (int h = 0; h < hosts; ++h) all_done &= step[h] == steps;
      if (all_done && !round_open) break;
      const int h = rng() % hosts;
      switch (rng() % 3) {
        case 0:  // host h's ranks submit their next tensor
          if (!todo[h].empty()) {
            std::string name = todo[h].back();
            todo[h].pop_back();
            running[h].insert(name);
            ReadyTensor t = job.Local(h, name, elements(h, name));
            if (!job.host[h].Offer(t)) to_coordinator(h, name);
          }
          break;
        case 1:  // a coordinator list reaches host h
          if (!inbox[h].empty()) {
            job.host[h].Received(std::move(inbox[h].front()));
            inbox[h].pop_front();
          }
          break;
        default:  // a round, when one is due; hosts apply its outcome when they can
          if (!round_open) {
            bool due = false;
            for (auto& s : job.host) due |= s.changed();
            if (!due) break;
            job.Round();
            round_open = true;
          }
          round_open = false;
          for (int g = 0; g < hosts; ++g) {
            if (!job.host[g].applying()) continue;
            auto out = job.host[g].TakeOutcome();
            if (!out) {
              round_open = true;
              continue;
            }
            sequence[g] += Names(out->run) + ";";
            for (const Response& r : out->run) {
              for (const ReadyTensor& t : r.tensors) running[g].erase(t.name);
              for (const std::vector<uint8_t>& data : r.reduced) {
                std::vector<float> values(data.size() / 4);
                std::memcpy(values.data(), data.data(), data.size());
                CHECK(values == std::vector<float>(values.size(), sum));
                ++carried;
              }
            }
            for (const ReadyTensor& t : out->to_coordinator) to_coordinator(g, t.name);
          }
          break;
      }
      for (int g = 0; g < hosts; ++g) {
        if (step[g] < steps && todo[g].empty() && running[g].empty() && ++step[g] < steps) {
          next_step(g);
        }
      }
    }
    for (int h = 0; h < hosts; ++h) REQUIRE(step[h] == steps);
    for (int h = 1; h < hosts; ++h) CHECK(sequence[h] == sequence[0]);
    CHECK(central_after_first_step == hosts);
    CHECK((seed % 2 == 1) == (carried > 0));
  }
}

}  // namespace
}  // namespace ard::negotiation
