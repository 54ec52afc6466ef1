// How a reducescatter splits the first dimension among ranks (Horovod's rule): as even as
// possible, the first `rows % size` ranks get one row more. One definition for the host and GPU
// data planes. Pure; any thread.
#pragma once

#include <cstdint>

namespace ard::collectives {

// Rows of `rank`'s block when `rows` rows are split among `size` ranks.
inline int64_t RowsOfRank(int64_t rows, int size, int rank) {
  return rows / size + (rank < rows % size ? 1 : 0);
}

// The first row of `rank`'s block.
inline int64_t FirstRowOfRank(int64_t rows, int size, int rank) {
  const int64_t longer = rows % size;
  return rank * (rows / size) + (rank < longer ? rank : longer);
}

}  // namespace ard::collectives
