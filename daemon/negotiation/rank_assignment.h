// Rank assignment (DESIGN.md "Jobs, ranks and membership"): the one rule every place that hands
// out ranks follows. Ranks a launcher gave are kept; the other entries take the free ranks in
// ascending order of their `order` (ties: their position in the list). Callers choose `order`:
// a single-host job uses the local rank (then arrival), a host's local ranks use arrival, the
// coordinator uses host order then local rank.
// Pure function; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace ard::negotiation {

struct RankRequest {
  int requested = -1;  // the rank the launcher gave, or -1 (any negative: none)
  int64_t order = 0;   // among entries without a requested rank: lower takes a lower rank
};

// The rank of each entry, index for index. InvalidArgument when a requested rank is out of
// [0, size) or given twice, or when there are more entries than ranks. Fewer entries than `size`
// leave the highest free ranks unassigned.
absl::StatusOr<std::vector<int>> AssignRanks(const std::vector<RankRequest>& entries, int size);

}  // namespace ard::negotiation
