// Rank information from the launcher's environment (DESIGN.md "Jobs, ranks and membership"):
// allreduced's own variables, then Open MPI, PMI (MPICH/Intel MPI), Slurm and Horovod. The first
// family that sets a rank or a size wins and is used as a whole, so variables of two launchers are
// never mixed. Pure functions over an injectable environment lookup; any thread.
#pragma once

#include <functional>
#include <string>

#include "client/status.h"

namespace ard::client {

// Returns the value of an environment variable, or nullptr when it is unset.
using EnvLookup = std::function<const char*(const char* name)>;

// The process environment (getenv): not safe against a concurrent setenv.
EnvLookup ProcessEnv();

// -1 where unknown.
struct RankInfo {
  int rank = -1;
  int size = -1;
  int local_rank = -1;
  int local_size = -1;
  std::string family;  // "ALLREDUCED", "OMPI", "PMI", "SLURM", "HOROVOD", or "" when none
};

// Reads the first launcher family that has a rank or size variable set (non-empty). A variable of
// the chosen family that is set but not a non-negative integer is InvalidArgument, naming it
// (except SLURM_NTASKS_PER_NODE, which Slurm writes as "2(x3)" on uneven nodes: then unknown).
Status RanksFromEnv(const EnvLookup& env, RankInfo* out);

// Parses a whole decimal integer in [min, max]; false for anything else ("", "1x", " 1", overflow).
bool ParseInt64(const char* text, int64_t min, int64_t max, int64_t* out);

// Checks that known values are consistent (rank < size, local_rank < local_size, sizes >= 1).
Status ValidateRanks(const RankInfo& ranks);

}  // namespace ard::client
