#include "daemon/negotiation/rank_assignment.h"

#include <algorithm>
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

}  // namespace ard::negotiation
