#include "daemon/negotiation/rank_assignment.h"

#include <algorithm>
#include <climits>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ard::negotiation {

absl::StatusOr<std::vector<int>> AssignRanks(const std::vector<RankRequest>& entries, int size) {
  if (size < 0 || entries.size() > static_cast<size_t>(size)) {
    return absl::InvalidArgumentError(
        absl::StrCat(entries.size(), " ranks registered for a job of size ", size));
  }
  std::vector<int> out(entries.size(), -1);
  std::vector<bool> taken(size, false);
  std::vector<size_t> unranked;
  for (size_t i = 0; i < entries.size(); ++i) {
    const int r = entries[i].requested;
    if (r < 0) {
      unranked.push_back(i);
      continue;
    }
    if (r >= size) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, " is out of range for a job of size ", size));
    }
    if (taken[r]) return absl::InvalidArgumentError(absl::StrCat("rank ", r, " given twice"));
    taken[r] = true;
    out[i] = r;
  }
  std::stable_sort(unranked.begin(), unranked.end(),
                   [&](size_t a, size_t b) { return entries[a].order < entries[b].order; });
  int next_free = 0;
  for (size_t i : unranked) {
    while (taken[next_free]) ++next_free;  // in range: entries.size() <= size
    taken[next_free] = true;
    out[i] = next_free;
  }
  return out;
}

std::vector<int> AssignElasticRanks(const std::vector<int>& places, int max_np) {
  std::vector<size_t> by_place(places.size());
  std::iota(by_place.begin(), by_place.end(), size_t{0});
  auto place = [&](size_t i) { return places[i] < 0 ? INT_MAX : places[i]; };
  std::stable_sort(by_place.begin(), by_place.end(),
                   [&](size_t a, size_t b) { return place(a) < place(b); });
  std::vector<int> out(places.size(), -1);
  for (size_t k = 0; k < by_place.size() && (max_np <= 0 || k < static_cast<size_t>(max_np)); ++k) {
    out[by_place[k]] = static_cast<int>(k);
  }
  return out;
}

absl::StatusOr<std::vector<int>> FormationRanks(const std::vector<RankRequest>& entries, int size,
                                                bool elastic) {
  if (!elastic) return AssignRanks(entries, size);
  std::vector<int> places;
  places.reserve(entries.size());
  for (const RankRequest& e : entries) places.push_back(e.requested);
  return AssignElasticRanks(places, size);
}

}  // namespace ard::negotiation
