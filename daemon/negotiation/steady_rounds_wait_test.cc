// The readiness rounds' partial-submission wait, and random interleavings of hosts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "catch2/catch.hpp"
#include "daemon/negotiation/steady_rounds.h"
#include "daemon/negotiation/steady_rounds_test_util.h"

namespace ard::negotiation::testing {
namespace {

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
}  // namespace ard::negotiation::testing
