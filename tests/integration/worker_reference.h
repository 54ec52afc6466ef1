// Test cases and their expected results for collective_worker: deterministic inputs for every
// rank from a seed, and a reference computed element by element with the independent scalar
// reference of daemon/collectives/reduce_reference.h (same documented semantics as the daemon:
// rank order, per-step rounding for 16-bit floats, prescale per input, postscale and 1/size for
// Average at the end; Adasum: its tree over each host's ranks, then over hosts, within rounding).
// Test-only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "client/allreduced_client.h"

namespace ard::testing {

struct Case {
  std::string name;
  int collective = 1;  // wire::Collective
  int dtype = 9;       // wire::DataType
  int op = 1;          // wire::ReduceOp
  std::vector<int64_t> shape;       // shape of rank 0's input (and every rank's, unless below)
  std::vector<int64_t> first_dims;  // per rank first dimension (allgather/alltoall), or empty
  std::vector<std::vector<int64_t>> splits;  // alltoall: per sending rank, or empty (even)
  int root = 0;
  double prescale = 1.0, postscale = 1.0;
  int group_id = -1, group_size = 0;
};

struct Inputs {
  std::vector<std::vector<uint8_t>> per_rank;
  std::vector<std::vector<int64_t>> shapes;
};

struct Expected {
  std::vector<uint8_t> bytes;
  // Adasum: the reference (adasum_reference.h) agrees within rounding; the result passes when
  // every element is within tolerance x the largest magnitude. 0: bytes must be equal.
  double tolerance = 0;
  int dtype = 0;  // with a tolerance: the elements' wire::DataType
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;  // checked when not empty
};

Inputs MakeInputs(const Case& c, int size, uint64_t seed);
// `present[r]` false: rank r has joined (contributes nothing). Empty: everyone takes part.
// `local_size`: ranks per host (host-major rank blocks), which fixes the reduction order;
// 0 means one host.
Expected ComputeExpected(const Case& c, const Inputs& in, int rank, int size,
                         const std::vector<bool>& present = {}, int local_size = 0);
bool CheckResult(const Expected& e, const ard_result& r, std::string* why);
// Points `req` at `data` (rank `rank`'s input, which must outlive the submit call) and the case's
// fields.
void FillRequest(const Case& c, const std::vector<uint8_t>& data, const std::string& name,
                 int rank, ard_request* req);
uint64_t Fnv1a(const void* data, uint64_t bytes);

// Every collective x reduce op x dtype the daemon supports, plus scale factors, uneven shapes,
// empty tensors, a large tensor and a barrier.
std::vector<Case> MatrixCases(int size);
std::vector<Case> GroupCases();
// Allreduce with ReduceOp::kAdasum: float16/32/64, scaled, large, scalar and empty tensors; a
// group; and two requests the daemon refuses (an int32 tensor, a reducescatter).
std::vector<Case> AdasumCases();
std::vector<Case> AdasumGroupCases();
std::vector<Case> AdasumRefusedCases();
Case SmallAllreduce(int index);
// Small allreduces for the steady state's carried rounds: sum, average, min, max of float32 and
// int32, each of 1 element and of `over_elements` (past the carried limit), and a scaled one.
std::vector<Case> CarriedCases(int over_elements);

}  // namespace ard::testing
