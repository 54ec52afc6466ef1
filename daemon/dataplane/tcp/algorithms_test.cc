#include "daemon/dataplane/tcp/algorithms.h"

#include <algorithm>
#include <cmath>

#include "catch2/catch.hpp"

namespace ard::dataplane::tcp {
namespace {

TEST_CASE("MeshPeers is symmetric, connected and O(log n) for 1 to 1100 hosts") {
  for (int n = 1; n <= 1100; n += (n < 40 ? 1 : 37)) {
    INFO("n=" << n);
    const int p = PowerOfTwoFloor(n);
    REQUIRE(p <= n);
    REQUIRE(2 * p > n);
    std::vector<std::vector<int>> peers(n);
    for (int h = 0; h < n; ++h) {
      peers[h] = MeshPeers(h, n);
      REQUIRE(std::is_sorted(peers[h].begin(), peers[h].end()));
      REQUIRE(std::count(peers[h].begin(), peers[h].end(), h) == 0);
      // Ring neighbours (2), hypercube partners (log2 p), fold partner (1).
      REQUIRE(peers[h].size() <= static_cast<size_t>(3 + std::log2(p)));
      if (n > 1) {
        REQUIRE(std::count(peers[h].begin(), peers[h].end(), (h + 1) % n) == 1);
        REQUIRE(std::count(peers[h].begin(), peers[h].end(), (h + n - 1) % n) == 1);
      }
    }
    for (int h = 0; h < n; ++h) {
      for (int j : peers[h]) {
        REQUIRE(j >= 0);
        REQUIRE(j < n);
        REQUIRE(std::count(peers[j].begin(), peers[j].end(), h) == 1);
      }
      if (h < p) {
        for (int bit = 1; bit < p; bit *= 2) {
          REQUIRE(std::count(peers[h].begin(), peers[h].end(), h ^ bit) == 1);
        }
      }
      if (h >= p) REQUIRE(std::count(peers[h].begin(), peers[h].end(), h - p) == 1);
    }
  }
  REQUIRE(MeshPeers(0, 1).empty());
  REQUIRE(MeshPeers(1000, 1001).size() == 3);  // ring neighbours and fold partner 488
}

TEST_CASE("ChooseAllreduce: recursive doubling below the threshold or under n elements") {
  AlgorithmOptions o;
  o.ring_threshold_bytes = 1000;
  REQUIRE(ChooseAllreduce(o, 4, 1, 4) == AllreduceAlgorithm::kRecursiveDoubling);
  REQUIRE(ChooseAllreduce(o, 4, 249, 4) == AllreduceAlgorithm::kRecursiveDoubling);
  REQUIRE(ChooseAllreduce(o, 4, 250, 4) == AllreduceAlgorithm::kRing);
  REQUIRE(ChooseAllreduce(o, 2000, 1999, 8) == AllreduceAlgorithm::kRecursiveDoubling);
  REQUIRE(ChooseAllreduce(o, 2000, 2000, 8) == AllreduceAlgorithm::kRing);
  o.allreduce = AllreduceAlgorithm::kRing;
  REQUIRE(ChooseAllreduce(o, 4, 1, 4) == AllreduceAlgorithm::kRing);
  o.allreduce = AllreduceAlgorithm::kRecursiveDoubling;
  REQUIRE(ChooseAllreduce(o, 4, 1 << 30, 4) == AllreduceAlgorithm::kRecursiveDoubling);
}

TEST_CASE("Algorithm names parse back; other names are refused; fingerprints tell options apart") {
  for (AllreduceAlgorithm a : {AllreduceAlgorithm::kAuto, AllreduceAlgorithm::kRing,
                               AllreduceAlgorithm::kRecursiveDoubling}) {
    REQUIRE(*ParseAllreduceAlgorithm(AllreduceAlgorithmName(a)) == a);
  }
  REQUIRE(ParseAllreduceAlgorithm("tree").status().code() == absl::StatusCode::kInvalidArgument);
  AlgorithmOptions a, b;
  REQUIRE(Fingerprint(a) == Fingerprint(b));
  b.chunk_bytes = 1 << 20;
  REQUIRE(Fingerprint(a) != Fingerprint(b));
  b = a;
  b.ring_threshold_bytes += 1;
  REQUIRE(Fingerprint(a) != Fingerprint(b));
  b = a;
  b.allreduce = AllreduceAlgorithm::kRing;
  REQUIRE(Fingerprint(a) != Fingerprint(b));
  b = a;
  b.steady_round_data_max_bytes = a.steady_round_data_max_bytes + 1024;
  REQUIRE(Fingerprint(a) != Fingerprint(b));
  b = a;
  b.steady_state = !a.steady_state;
  REQUIRE(Fingerprint(a) != Fingerprint(b));
}

}  // namespace
}  // namespace ard::dataplane::tcp
