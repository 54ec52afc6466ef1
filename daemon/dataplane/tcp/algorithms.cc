#include "daemon/dataplane/tcp/algorithms.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ard::dataplane::tcp {

std::string AllreduceAlgorithmName(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::kRing:
      return "ring";
    case AllreduceAlgorithm::kRecursiveDoubling:
      return "recursive_doubling";
    case AllreduceAlgorithm::kAuto:
      break;
  }
  return "auto";
}

absl::StatusOr<AllreduceAlgorithm> ParseAllreduceAlgorithm(const std::string& name) {
  for (AllreduceAlgorithm a : {AllreduceAlgorithm::kAuto, AllreduceAlgorithm::kRing,
                               AllreduceAlgorithm::kRecursiveDoubling}) {
    if (name == AllreduceAlgorithmName(a)) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", name, "' is not one of auto, ring, recursive_doubling"));
}

AllreduceAlgorithm ChooseAllreduce(const AlgorithmOptions& options, int n, size_t count,
                                   size_t element_bytes) {
  if (options.allreduce != AllreduceAlgorithm::kAuto) return options.allreduce;
  if (count < static_cast<size_t>(n) || count * element_bytes < options.ring_threshold_bytes) {
    return AllreduceAlgorithm::kRecursiveDoubling;
  }
  return AllreduceAlgorithm::kRing;
}

uint64_t Fingerprint(const AlgorithmOptions& options) {
  // FNV-1a over the fields that shape message patterns.
  uint64_t h = 1469598103934665603ull;
  for (uint64_t v :
       {static_cast<uint64_t>(options.allreduce),
        static_cast<uint64_t>(options.ring_threshold_bytes),
        static_cast<uint64_t>(options.chunk_bytes), static_cast<uint64_t>(options.steady_state),
        options.steady_round_data_max_bytes}) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

int PowerOfTwoFloor(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

std::vector<int> MeshPeers(int self, int n) {
  std::vector<int> peers;
  if (n < 2) return peers;
  peers.push_back((self + 1) % n);
  peers.push_back((self + n - 1) % n);
  const int p = PowerOfTwoFloor(n);
  if (self < p) {
    for (int bit = 1; bit < p; bit *= 2) peers.push_back(self ^ bit);
    if (self + p < n) peers.push_back(self + p);
  } else {
    peers.push_back(self - p);
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  peers.erase(std::remove(peers.begin(), peers.end(), self), peers.end());
  return peers;
}

}  // namespace ard::dataplane::tcp
