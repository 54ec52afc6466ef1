#include "daemon/negotiation/rank_assignment.h"

#include "catch2/catch.hpp"

namespace ard::negotiation {
namespace {

TEST_CASE("Given ranks are kept, the rest take the free ones in list order") {
  CHECK(*AssignRanks({-1, -1, -1}, 3) == std::vector<int>{0, 1, 2});
  CHECK(*AssignRanks({2, -1, 0, -1}, 4) == std::vector<int>{2, 1, 0, 3});
  CHECK(*AssignRanks({-1, 1}, 3) == std::vector<int>{0, 1});  // fewer entries than ranks
  CHECK(AssignRanks({}, 0)->empty());
}

TEST_CASE("A rank given twice, out of range, or too many entries is InvalidArgument") {
  CHECK(absl::IsInvalidArgument(AssignRanks({1, 1}, 2).status()));
  CHECK(absl::IsInvalidArgument(AssignRanks({2}, 2).status()));
  CHECK(absl::IsInvalidArgument(AssignRanks({-1, -1, -1}, 2).status()));
  CHECK(AssignRanks({1, 1}, 2).status().message().find("rank 1 given twice") !=
        std::string::npos);
}

}  // namespace
}  // namespace ard::negotiation
