// Test helpers of the readiness rounds' tests (steady_rounds_test, steady_rounds_wait_test,
// round_vote_test): simulated hosts of one job, each with its SteadyRounds, and a reducer for the
// carried data. Test only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "catch2/catch.hpp"
#include "daemon/negotiation/steady_rounds.h"

namespace ard::negotiation::testing {

using wire::DataType;
using wire::ReduceOp;

inline constexpr uint64_t kFusion = 1 << 20;

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

inline TensorRequest Request(int rank, const std::string& name, int64_t elements = 1) {
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

inline std::vector<int> OneRankPerHost(int hosts) {
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
inline std::string Names(const std::vector<Response>& run) {
  std::string out;
  for (const Response& r : run) {
    if (!out.empty()) out += "|";
    for (size_t i = 0; i < r.tensors.size(); ++i) out += (i ? "," : "") + r.tensors[i].name;
  }
  return out;
}

// Both hosts cached a, b and c (list 1 released by a first round).
inline Job CachedAbc() {
  Job job(2);
  for (auto& h : job.host) h.Received(job.List({"a", "b", "c"}, {{1, "a"}, {2, "b"}, {3, "c"}}));
  job.Round();
  for (auto& h : job.host) REQUIRE(Names(h.TakeOutcome()->run) == "a|b|c");
  return job;
}

inline TensorRequest Meta(const std::string& name, wire::DataType dtype, wire::ReduceOp op,
                          int64_t elements) {
  TensorRequest r = Request(0, name, elements);
  r.meta.dtype = static_cast<uint32_t>(dtype);
  r.meta.reduce_op = static_cast<uint32_t>(op);
  r.meta.bytes = elements * wire::DataTypeSize(r.meta.dtype);
  return r;
}

}  // namespace ard::negotiation::testing
