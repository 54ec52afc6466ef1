#include "daemon/negotiation/rank_assignment.h"

#include "absl/strings/str_cat.h"

namespace ard::negotiation {

absl::StatusOr<std::vector<int>> AssignRanks(const std::vector<int>& requested, int size) {
  if (static_cast<int>(requested.size()) > size) {
    return absl::InvalidArgumentError(
        absl::StrCat(requested.size(), " ranks registered for a size of ", size));
  }
  std::vector<bool> taken(size, false);
  for (int r : requested) {
    if (r < 0) continue;
    if (r >= size || taken[r]) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, " given twice or out of range (size ", size, ")"));
    }
    taken[r] = true;
  }
  std::vector<int> out = requested;
  int next = 0;
  for (int& r : out) {
    if (r >= 0) continue;
    while (taken[next]) ++next;
    r = next;
    taken[next] = true;
  }
  return out;
}

}  // namespace ard::negotiation
