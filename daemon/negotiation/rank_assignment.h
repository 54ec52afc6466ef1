// The one rule by which a job's ranks (or a host's local ranks) are numbered: a number the
// launcher gave is kept; the others take the free numbers in ascending order, in the order the
// caller lists them (the caller sorts by its own key first: host then local rank, local rank then
// arrival, or arrival). Pure; any thread.
#pragma once

#include <vector>

#include "absl/status/statusor.h"

namespace ard::negotiation {

// `requested[i]` is entry i's number from the launcher, or -1. Returns each entry's number in
// [0, size), or InvalidArgument for a number given twice or out of range, or more entries than
// numbers.
absl::StatusOr<std::vector<int>> AssignRanks(const std::vector<int>& requested, int size);

}  // namespace ard::negotiation
