// Rank assignment (DESIGN.md "Jobs, ranks and membership"): the one rule every place that hands
// out ranks follows. Ranks a launcher gave are kept; the other entries take the free ranks in
// ascending order of their `order` (ties: their position in the list). Callers choose `order`:
// a single-host job uses the local rank (then arrival), a host's local ranks use arrival, the
// coordinator uses host order then local rank. An elastic job's ranks are dense in the order of
// the processes' places (AssignElasticRanks), and at most max_np of them take part.
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

// Elastic jobs: entry i's place in rank order is `places[i]` (its rank in the last generation or
// the launcher's ALLREDUCED_RANK; negative: none, after every given place). The entries are
// numbered 0, 1, ... in ascending place (ties: their position in the list, which the caller
// orders: arrival, or host order then local rank); only the first `max_np` (0: no bound) get a
// rank, the rest -1: they are left out of the generation.
std::vector<int> AssignElasticRanks(const std::vector<int>& places, int max_np);

// A generation's ranks: the one fixed/elastic rule every place that numbers a job's processes
// follows (a single-host job, a host's local ranks of a cross-host job, the coordinator's
// layout). Elastic: AssignElasticRanks with each entry's `requested` as its place and `size` as
// max_np (0: no bound; never fails; `order` unused). Fixed: AssignRanks over `size` ranks.
absl::StatusOr<std::vector<int>> FormationRanks(const std::vector<RankRequest>& entries, int size,
                                                bool elastic);

}  // namespace ard::negotiation
