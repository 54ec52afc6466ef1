#include "daemon/collectives/row_split.h"

#include "catch2/catch.hpp"

namespace ard::collectives {
namespace {

TEST_CASE("Row split gives the first rows % size ranks one row more, blocks contiguous") {
  for (int size = 1; size <= 7; ++size) {
    for (int64_t rows = 0; rows <= 23; ++rows) {
      int64_t next = 0;
      for (int r = 0; r < size; ++r) {
        const int64_t mine = RowsOfRank(rows, size, r);
        CHECK(mine == rows / size + (r < rows % size ? 1 : 0));
        CHECK(FirstRowOfRank(rows, size, r) == next);
        next += mine;
      }
      CHECK(next == rows);
    }
  }
  CHECK(RowsOfRank(5, 3, 0) == 2);
  CHECK(RowsOfRank(5, 3, 2) == 1);
  CHECK(FirstRowOfRank(5, 3, 2) == 4);
}

}  // namespace
}  // namespace ard::collectives
