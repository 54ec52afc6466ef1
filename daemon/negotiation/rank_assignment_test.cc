// AssignRanks as its three callers use it: a single-host job's ranks, a host's local ranks in a
// cross-host job, and the coordinator's global ranks; and the errors it names. AssignElasticRanks:
// dense by place, at most max_np.
#include "daemon/negotiation/rank_assignment.h"

#include <climits>

#include "catch2/catch.hpp"

namespace ard::negotiation {
namespace {

std::vector<int> Assign(const std::vector<RankRequest>& entries, int size) {
  absl::StatusOr<std::vector<int>> r = AssignRanks(entries, size);
  REQUIRE(r.ok());
  return *r;
}

TEST_CASE("single-host job: launcher's ranks kept, the rest by local rank, then arrival") {
  // Arrival order: local rank 2, unknown local rank, launcher rank 0, local rank 1, unknown.
  // Unknown local ranks sort last (order INT_MAX) and among themselves by arrival.
  const std::vector<RankRequest> entries = {{-1, 2}, {-1, INT_MAX}, {0, 0}, {-1, 1}, {-1, INT_MAX}};
  CHECK(Assign(entries, 5) == std::vector<int>{2, 3, 0, 1, 4});
}

TEST_CASE("a host's local ranks: the launcher's kept, free ones by arrival") {
  // Local size 4: two processes gave local ranks 1 and 3, two gave none (arrival = index).
  const std::vector<RankRequest> entries = {{-1, 0}, {3, 1}, {-1, 2}, {1, 3}};
  CHECK(Assign(entries, 4) == std::vector<int>{0, 3, 2, 1});
}

TEST_CASE("coordinator: launcher's ranks kept, the rest by host order, then local rank") {
  // Hosts a (local ranks 0, 1) and b (0, 1) listed in host order; b's local rank 0 asked for
  // global rank 0, so a's ranks move up.
  const std::vector<RankRequest> entries = {{-1, 0}, {-1, 1}, {0, 2}, {-1, 3}};
  CHECK(Assign(entries, 4) == std::vector<int>{1, 2, 0, 3});
  // Nobody asked: ranks follow the list order.
  CHECK(Assign({{-1, 0}, {-1, 1}, {-1, 2}}, 3) == std::vector<int>{0, 1, 2});
}

TEST_CASE("fewer entries than ranks leave the highest free ranks unassigned") {
  CHECK(Assign({{-1, 0}, {1, 0}}, 4) == std::vector<int>{0, 1});
  CHECK(Assign({}, 2).empty());
}

TEST_CASE("a rank given twice, out of range or too many entries is InvalidArgument") {
  auto twice = AssignRanks({{1, 0}, {-1, 1}, {1, 2}}, 3);
  CHECK(twice.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(twice.status().message() == "rank 1 given twice");
  auto high = AssignRanks({{-1, 0}, {2, 1}}, 2);
  CHECK(high.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(high.status().message() == "rank 2 is out of range for a job of size 2");
  auto many = AssignRanks({{-1, 0}, {-1, 1}, {-1, 2}}, 2);
  CHECK(many.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(many.status().message() == "3 ranks registered for a job of size 2");
}

TEST_CASE("elastic: dense in place order (none: last), ties by position, at most max_np") {
  // Places 3, none, 0, 3, none: place 0 first, the two 3s by position, then the two without one.
  const std::vector<int> places = {3, -1, 0, 3, -1};
  CHECK(AssignElasticRanks(places, 0) == std::vector<int>{1, 3, 0, 2, 4});
  // max_np 3: the last two in that order are left out (-1), whatever their position.
  CHECK(AssignElasticRanks(places, 3) == std::vector<int>{1, -1, 0, 2, -1});
  CHECK(AssignElasticRanks(places, 5) == AssignElasticRanks(places, 0));
  CHECK(AssignElasticRanks({}, 2).empty());
}

TEST_CASE("a generation's ranks: one rule, fixed or elastic") {
  const std::vector<RankRequest> entries = {{3, 0}, {-1, 1}, {0, 2}};
  // Fixed: the launcher's ranks kept, the rest by order; errors as AssignRanks'.
  CHECK(*FormationRanks(entries, 4, false) == *AssignRanks(entries, 4));
  CHECK(FormationRanks(entries, 2, false).status().code() == absl::StatusCode::kInvalidArgument);
  // Elastic: `requested` is the place, `size` is max_np (0: no bound); never fails.
  CHECK(*FormationRanks(entries, 0, true) == std::vector<int>{1, 2, 0});
  CHECK(*FormationRanks(entries, 2, true) == std::vector<int>{1, -1, 0});
}

}  // namespace
}  // namespace ard::negotiation
