// The scenario tables of collective_worker: what "every collective x reduce op x dtype" means.
#include "absl/strings/str_cat.h"
#include "proto/local_wire.h"
#include "tests/integration/worker_reference.h"

namespace ard::testing {
namespace {

using wire::Collective;
using wire::DataType;
using wire::ReduceOp;

constexpr DataType kReducible[] = {DataType::kUint8,   DataType::kInt8,     DataType::kInt32,
                                   DataType::kInt64,   DataType::kFloat16,  DataType::kBfloat16,
                                   DataType::kFloat32, DataType::kFloat64};
constexpr DataType kAll[] = {DataType::kUint8,   DataType::kInt8,    DataType::kUint16,
                             DataType::kInt16,   DataType::kInt32,   DataType::kInt64,
                             DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
                             DataType::kFloat64, DataType::kBool};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};

int I(Collective c) { return static_cast<int>(c); }
int I(DataType d) { return static_cast<int>(d); }
int I(ReduceOp o) { return static_cast<int>(o); }

}  // namespace

Case SmallAllreduce(int index) {
  Case c;
  c.name = absl::StrCat("small.", index);
  c.collective = I(Collective::kAllreduce);
  c.dtype = I(DataType::kFloat32);
  c.op = I(ReduceOp::kSum);
  c.shape = {1 + index % 17};
  return c;
}

std::vector<Case> MatrixCases(int size) {
  std::vector<Case> cases;
  int n = 0;
  auto add = [&](Case c) {
    c.name = absl::StrCat(c.name, ".", n++);
    cases.push_back(std::move(c));
  };
  for (DataType d : kReducible) {
    for (ReduceOp o : kOps) {
      Case c;
      c.name = absl::StrCat("allreduce.", I(d), ".", I(o));
      c.collective = I(Collective::kAllreduce);
      c.dtype = I(d);
      c.op = I(o);
      c.shape = {3, 37};  // 111 elements: vector loop bodies and tails
      add(c);
      Case rs = c;
      rs.name = absl::StrCat("reducescatter.", I(d), ".", I(o));
      rs.collective = I(Collective::kReducescatter);
      rs.shape = {2 * size + 1, 5};  // uneven: the first ranks get one row more
      add(rs);
    }
  }
  for (DataType d : {DataType::kFloat32, DataType::kFloat16, DataType::kBfloat16,
                     DataType::kInt32, DataType::kFloat64}) {
    Case c;
    c.name = absl::StrCat("scaled.", I(d));
    c.collective = I(Collective::kAllreduce);
    c.dtype = I(d);
    c.op = I(ReduceOp::kSum);
    c.shape = {64};
    c.prescale = 0.5;
    c.postscale = 3.0;
    add(c);
  }
  for (DataType d : kAll) {
    Case g;
    g.name = absl::StrCat("allgather.", I(d));
    g.collective = I(Collective::kAllgather);
    g.dtype = I(d);
    g.shape = {1, 3};
    for (int r = 0; r < size; ++r) g.first_dims.push_back(r == 1 ? 0 : r + 1);  // rank 1: empty
    add(g);
    Case b;
    b.name = absl::StrCat("broadcast.", I(d));
    b.collective = I(Collective::kBroadcast);
    b.dtype = I(d);
    b.shape = {4, 9};
    b.root = n % size;
    add(b);
    Case a;
    a.name = absl::StrCat("alltoall.", I(d));
    a.collective = I(Collective::kAlltoall);
    a.dtype = I(d);
    a.shape = {0, 2};
    for (int s = 0; s < size; ++s) {
      std::vector<int64_t> row;
      int64_t total = 0;
      for (int r = 0; r < size; ++r) {
        row.push_back((s + 2 * r) % 3);
        total += row.back();
      }
      a.splits.push_back(row);
      a.first_dims.push_back(total);
    }
    add(a);
  }
  Case even;
  even.name = "alltoall.even";
  even.collective = I(Collective::kAlltoall);
  even.dtype = I(DataType::kInt32);
  even.shape = {2 * size, 3};
  add(even);
  Case empty;
  empty.name = "allreduce.empty";
  empty.collective = I(Collective::kAllreduce);
  empty.shape = {0, 4};
  add(empty);
  Case large;
  large.name = "allreduce.large";
  large.collective = I(Collective::kAllreduce);
  large.shape = {1 << 20};  // 4 MiB of float32
  add(large);
  Case scalar;
  scalar.name = "allreduce.scalar";
  scalar.collective = I(Collective::kAllreduce);
  scalar.dtype = I(DataType::kFloat64);
  scalar.shape = {};
  add(scalar);
  Case barrier;
  barrier.name = "barrier";
  barrier.collective = I(Collective::kBarrier);
  add(barrier);
  return cases;
}

std::vector<Case> AdasumCases() {
  std::vector<Case> cases;
  for (DataType d : {DataType::kFloat16, DataType::kFloat32, DataType::kFloat64}) {
    Case c;
    c.name = absl::StrCat("adasum.", I(d));
    c.collective = I(Collective::kAllreduce);
    c.dtype = I(d);
    c.op = I(ReduceOp::kAdasum);
    c.shape = {3, 37};
    cases.push_back(c);
  }
  Case scaled = cases[1];
  scaled.name = "adasum.scaled";
  scaled.prescale = 0.5;
  scaled.postscale = 3.0;
  cases.push_back(scaled);
  Case large = cases[1];
  large.name = "adasum.large";
  large.shape = {1 << 18};  // 1 MiB of float32
  cases.push_back(large);
  Case scalar = cases[2];
  scalar.name = "adasum.scalar";
  scalar.shape = {};
  cases.push_back(scalar);
  Case empty = cases[1];
  empty.name = "adasum.empty";
  empty.shape = {0, 4};
  cases.push_back(empty);
  return cases;
}

std::vector<Case> AdasumGroupCases() {
  std::vector<Case> group = GroupCases();
  for (Case& c : group) {
    c.name = "adasum." + c.name;
    c.op = I(ReduceOp::kAdasum);
    c.group_id = 2;
  }
  return group;
}

std::vector<Case> AdasumRefusedCases() {
  Case integer;
  integer.name = "adasum_refused.int32";
  integer.collective = I(Collective::kAllreduce);
  integer.dtype = I(DataType::kInt32);
  integer.op = I(ReduceOp::kAdasum);
  integer.shape = {4};
  Case scatter = integer;
  scatter.name = "adasum_refused.reducescatter";
  scatter.collective = I(Collective::kReducescatter);
  scatter.dtype = I(DataType::kFloat32);
  return {integer, scatter};
}

std::vector<Case> CarriedCases(int over_elements) {
  std::vector<Case> cases;
  for (DataType d : {DataType::kFloat32, DataType::kInt32}) {
    for (ReduceOp o : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax}) {
      for (int elements : {1, over_elements}) {
        Case c;
        c.name = absl::StrCat("carried.", I(d), ".", I(o), ".", elements);
        c.collective = I(Collective::kAllreduce);
        c.dtype = I(d);
        c.op = I(o);
        c.shape = {elements};
        cases.push_back(c);
      }
    }
  }
  Case scaled = cases[0];
  scaled.name = "carried.scaled";
  scaled.shape = {3};
  scaled.prescale = 0.5;
  scaled.postscale = 3.0;
  cases.push_back(scaled);
  return cases;
}

std::vector<Case> GroupCases() {
  std::vector<Case> group;
  for (int i = 0; i < 3; ++i) {
    Case c;
    c.name = absl::StrCat("group.", i);
    c.collective = I(Collective::kAllreduce);
    c.dtype = I(i == 1 ? DataType::kFloat16 : DataType::kFloat32);
    c.op = I(ReduceOp::kAverage);
    c.shape = {5 + i};
    c.group_id = 1;
    c.group_size = 3;
    group.push_back(c);
  }
  return group;
}

}  // namespace ard::testing
