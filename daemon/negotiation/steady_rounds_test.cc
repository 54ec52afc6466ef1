#include "daemon/negotiation/steady_rounds.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "catch2/catch.hpp"

namespace ard::negotiation {
namespace {

constexpr uint64_t kFusion = 1 << 20;

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

// A job whose rank r runs on host host_of_rank[r] (hosts numbered from 0).
struct Job {
  explicit Job(int hosts) : Job(OneRankPerHost(hosts)) {}
  explicit Job(std::vector<int> ranks_on) : host_of_rank(std::move(ranks_on)) {
    const int hosts = *std::max_element(host_of_rank.begin(), host_of_rank.end()) + 1;
    for (int h = 0; h < hosts; ++h) {
      std::vector<bool> here(size());
      for (int r = 0; r < size(); ++r) here[r] = host_of_rank[r] == h;
      host.emplace_back(here);
    }
  }
  int size() const { return static_cast<int>(host_of_rank.size()); }
  // Host h's ranks submitted `name` (with `elements` elements).
  ReadyTensor Local(int h, const std::string& name, int64_t elements = 1,
                    wire::Collective collective = wire::Collective::kAllreduce) const {
    ReadyTensor t{name, std::vector<std::optional<TensorRequest>>(size())};
    for (int r = 0; r < size(); ++r) {
      if (host_of_rank[r] != h) continue;
      t.ranks[r] = Request(r, name, elements);
      t.ranks[r]->meta.collective = static_cast<uint32_t>(collective);
      t.ranks[r]->request_id = 1000 + r;  // marks this host's own entry
    }
    return t;
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
      ReadyTensor t{name, std::vector<std::optional<TensorRequest>>(size())};
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
    for (size_t i = 1; i < votes.size(); ++i) CombineVotes(result, votes[i]);
    for (auto& h : host) REQUIRE(h.Agreed(result).ok());
    return result;
  }
  std::vector<int> host_of_rank;
  std::vector<SteadyRounds> host;
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

// A small model of the job: each host's ranks submit the same tensors every step in their own
// order (t0's shape changes at step 2); a host's tensor can be submitted again once it ran there;
// the coordinator commits a tensor once every host sent it (caching it, or re-caching it under a
// new id when its shape changed) and its lists reach each host after a random delay; rounds run
// whenever some host changed. Every host must run the same sequence, and after the first step
// only t0's new shape reaches the coordinator (once from every host).
TEST_CASE(
    "random interleavings: every host runs the same sequence; steady steps skip the "
    "coordinator") {
  for (int seed = 0; seed < 40; ++seed) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    const int hosts = 2 + seed % 4;
    const std::vector<std::string> names = {"t0", "t1", "t2", "t3", "t4", "t5"};
    const int steps = 4;
    Job job(hosts);
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
  }
}

}  // namespace
}  // namespace ard::negotiation
