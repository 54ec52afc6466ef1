#include "tests/integration/worker_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "proto/local_wire.h"
#include "daemon/collectives/adasum_reference.h"
#include "daemon/collectives/reduce_reference.h"

namespace ard::testing {
namespace {

using wire::DataType;
namespace ref = collectives::reference;

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Small values so that sums and products of a few ranks stay meaningful (integers still wrap
// where they overflow, identically in the daemon and here). Floats are 0 or +-2^k (k = -1..1):
// sums and products of a few ranks, and their prescaled values, are exact in every float type
// in any order, so the reference holds whatever fixed order the cross-host algorithm combines the
// hosts' partial results in (bit-identity across ranks is checked separately, by hash).
void Generate(DataType dtype, uint64_t u, uint8_t* out) {
  const int64_t small = static_cast<int64_t>(u % 21) - 10;
  static constexpr double kReals[] = {-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0};
  const double real = kReals[u % 7];
  switch (dtype) {
    case DataType::kUint8: *out = static_cast<uint8_t>(u % 12); break;
    case DataType::kInt8: { int8_t v = small; memcpy(out, &v, 1); break; }
    case DataType::kUint16: { uint16_t v = u % 60000; memcpy(out, &v, 2); break; }
    case DataType::kInt16: { int16_t v = small * 300; memcpy(out, &v, 2); break; }
    case DataType::kInt32: { int32_t v = small; memcpy(out, &v, 4); break; }
    case DataType::kInt64: { int64_t v = small * 1000003; memcpy(out, &v, 8); break; }
    case DataType::kFloat16: { uint16_t v = ref::FloatToHalf(real); memcpy(out, &v, 2); break; }
    case DataType::kBfloat16: {
      uint16_t v = ref::FloatToBfloat16(real);
      memcpy(out, &v, 2);
      break;
    }
    case DataType::kFloat32: { float v = real; memcpy(out, &v, 4); break; }
    case DataType::kFloat64: { double v = real; memcpy(out, &v, 8); break; }
    case DataType::kBool: *out = u & 1; break;
  }
}

std::vector<int64_t> ShapeOf(const Case& c, int rank) {
  std::vector<int64_t> shape = c.shape;
  if (!c.first_dims.empty()) shape[0] = c.first_dims[rank];
  return shape;
}

int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t RowBytes(const Case& c) {
  int64_t n = wire::DataTypeSize(c.dtype);
  for (size_t d = 1; d < c.shape.size(); ++d) n *= c.shape[d];
  return n;
}

void ScaleAll(const Case& c, double factor, std::vector<uint8_t>* buf) {
  if (factor == 1.0) return;
  const size_t elem = wire::DataTypeSize(c.dtype);
  for (size_t i = 0; i < buf->size(); i += elem) {
    ref::ScaleBytes(static_cast<DataType>(c.dtype), factor, buf->data() + i);
  }
}

void ReduceInto(const Case& c, const std::vector<uint8_t>& x, std::vector<uint8_t>* acc) {
  const size_t elem = wire::DataTypeSize(c.dtype);
  for (size_t i = 0; i < acc->size(); i += elem) {
    ref::ReduceBytes(static_cast<DataType>(c.dtype), static_cast<wire::ReduceOp>(c.op),
                     acc->data() + i, x.data() + i);
  }
}

// Element-wise reduction like the daemon's: each host reduces its ranks (host-major blocks of
// `local_size` ranks) in rank order, each input prescaled; then hosts' partial results are
// reduced (here in host order; the daemon's cross-host order differs, which Generate's values
// make invisible; a host whose ranks all joined contributes the identity: nothing).
std::vector<uint8_t> Reduce(const Case& c, const Inputs& in, int size,
                            const std::vector<bool>& present, int local_size) {
  std::vector<uint8_t> acc;
  bool have = false;
  for (int host = 0; host * local_size < size; ++host) {
    std::vector<uint8_t> partial;
    bool host_has = false;
    for (int r = host * local_size; r < (host + 1) * local_size && r < size; ++r) {
      if (!present.empty() && !present[r]) continue;
      std::vector<uint8_t> x = in.per_rank[r];
      ScaleAll(c, c.prescale, &x);
      if (!host_has) {
        partial = std::move(x);
        host_has = true;
      } else {
        ReduceInto(c, x, &partial);
      }
    }
    if (!host_has) continue;
    if (!have) {
      acc = std::move(partial);
      have = true;
    } else {
      ReduceInto(c, partial, &acc);
    }
  }
  double post = c.postscale;
  if (c.op == static_cast<int>(wire::ReduceOp::kAverage)) post /= size;
  ScaleAll(c, post, &acc);
  return acc;
}

// Doubles back to float16/32/64 bytes (rounding once to the type).
std::vector<uint8_t> FromDoubles(int dtype, const std::vector<double>& values) {
  const size_t elem = wire::DataTypeSize(dtype);
  std::vector<uint8_t> out(values.size() * elem);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == static_cast<int>(DataType::kFloat16)) {
      const uint16_t h = ref::FloatToHalf(static_cast<float>(values[i]));
      memcpy(&out[i * 2], &h, 2);
    } else if (dtype == static_cast<int>(DataType::kFloat32)) {
      const float f = static_cast<float>(values[i]);
      memcpy(&out[i * 4], &f, 4);
    } else {
      memcpy(&out[i * 8], &values[i], 8);
    }
  }
  return out;
}

// Adasum like the daemon's (DESIGN.md "Adasum"): the tree over each host's ranks (host-major
// blocks of `local_size`, rank order; a joined rank is a zero vector), each input prescaled, then
// the tree over the hosts' results in host order, then postscale.
std::vector<uint8_t> AdasumReduce(const Case& c, const Inputs& in, int size,
                                  const std::vector<bool>& present, int local_size) {
  const size_t count = in.per_rank[0].size() / wire::DataTypeSize(c.dtype);
  std::vector<std::vector<double>> hosts;
  for (int host = 0; host * local_size < size; ++host) {
    std::vector<std::vector<double>> ranks;
    for (int r = host * local_size; r < (host + 1) * local_size && r < size; ++r) {
      std::vector<uint8_t> x = in.per_rank[r];
      ScaleAll(c, c.prescale, &x);
      const bool joined = !present.empty() && !present[r];
      ranks.push_back(joined ? std::vector<double>(count, 0.0) : ref::FloatsAsDoubles(static_cast<DataType>(c.dtype), x));
    }
    hosts.push_back(ref::AdasumTree(ranks));
  }
  std::vector<double> result = ref::AdasumTree(hosts);
  for (double& v : result) v *= c.postscale;
  return FromDoubles(c.dtype, result);
}

int64_t SplitOf(const Case& c, int sender, int receiver, int size) {
  if (!c.splits.empty()) return c.splits[sender][receiver];
  return c.shape[0] / size;
}

}  // namespace

Inputs MakeInputs(const Case& c, int size, uint64_t seed) {
  Inputs in;
  const size_t elem = wire::DataTypeSize(c.dtype);
  uint64_t name_hash = Fnv1a(c.name.data(), c.name.size());
  for (int r = 0; r < size; ++r) {
    std::vector<int64_t> shape = ShapeOf(c, r);
    std::vector<uint8_t> data(Elements(shape) * elem);
    for (size_t i = 0; i < data.size() / std::max<size_t>(elem, 1); ++i) {
      Generate(static_cast<DataType>(c.dtype), SplitMix(seed ^ name_hash ^ (r * 0x1000193ull) ^
                                                        (i << 20)),
               data.data() + i * elem);
    }
    in.per_rank.push_back(std::move(data));
    in.shapes.push_back(std::move(shape));
  }
  return in;
}

Expected ComputeExpected(const Case& c, const Inputs& in, int rank, int size,
                         const std::vector<bool>& present, int local_size) {
  if (local_size <= 0) local_size = size;
  Expected e;
  const uint64_t row = RowBytes(c);
  std::vector<int64_t> rest(c.shape.begin() + (c.shape.empty() ? 0 : 1), c.shape.end());
  switch (static_cast<wire::Collective>(c.collective)) {
    case wire::Collective::kAllreduce:
      if (c.op == static_cast<int>(wire::ReduceOp::kAdasum)) {
        e.bytes = AdasumReduce(c, in, size, present, local_size);
        e.dtype = c.dtype;
        e.tolerance = c.dtype == static_cast<int>(DataType::kFloat16)   ? 1e-2
                      : c.dtype == static_cast<int>(DataType::kFloat32) ? 1e-5
                                                                        : 1e-12;
      } else {
        e.bytes = Reduce(c, in, size, present, local_size);
      }
      e.shape = c.shape;
      break;
    case wire::Collective::kAllgather: {
      int64_t rows = 0;
      for (int r = 0; r < size; ++r) {
        e.bytes.insert(e.bytes.end(), in.per_rank[r].begin(), in.per_rank[r].end());
        rows += in.shapes[r][0];
        e.splits.push_back(in.shapes[r][0]);
      }
      e.shape = {rows};
      e.shape.insert(e.shape.end(), rest.begin(), rest.end());
      break;
    }
    case wire::Collective::kBroadcast:
      e.bytes = in.per_rank[c.root];
      e.shape = c.shape;
      break;
    case wire::Collective::kAlltoall: {
      int64_t rows = 0;
      for (int s = 0; s < size; ++s) {
        int64_t skip = 0;
        for (int q = 0; q < rank; ++q) skip += SplitOf(c, s, q, size);
        const int64_t n = SplitOf(c, s, rank, size);
        const uint8_t* from = in.per_rank[s].data() + skip * row;
        e.bytes.insert(e.bytes.end(), from, from + n * row);
        e.splits.push_back(n);
        rows += n;
      }
      e.shape = {rows};
      e.shape.insert(e.shape.end(), rest.begin(), rest.end());
      break;
    }
    case wire::Collective::kReducescatter: {
      std::vector<uint8_t> full = Reduce(c, in, size, present, local_size);
      const int64_t d0 = c.shape[0];
      int64_t first = 0;
      for (int r = 0; r < rank; ++r) first += d0 / size + (r < d0 % size ? 1 : 0);
      const int64_t rows = d0 / size + (rank < d0 % size ? 1 : 0);
      e.bytes.assign(full.begin() + first * row, full.begin() + (first + rows) * row);
      e.shape = {rows};
      e.shape.insert(e.shape.end(), rest.begin(), rest.end());
      break;
    }
    default:
      break;  // barrier, join: no data
  }
  return e;
}

// Within e.tolerance x the largest expected magnitude, element by element (Adasum).
bool CloseEnough(const Expected& e, const ard_result& r, std::string* why) {
  const uint8_t* data = static_cast<const uint8_t*>(r.data);
  const std::vector<double> got = ref::FloatsAsDoubles(static_cast<DataType>(e.dtype), std::vector<uint8_t>(data, data + r.bytes));
  const std::vector<double> want = ref::FloatsAsDoubles(static_cast<DataType>(e.dtype), e.bytes);
  double scale = 1e-30;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= e.tolerance * scale)) {
      *why = "element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
             std::to_string(want[i]);
      return false;
    }
  }
  return true;
}

bool CheckResult(const Expected& e, const ard_result& r, std::string* why) {
  std::vector<int64_t> shape(r.shape, r.shape + r.ndims);
  if (shape != e.shape) {
    *why = "shape differs";
    return false;
  }
  if (r.bytes != e.bytes.size()) {
    *why = "result has " + std::to_string(r.bytes) + " bytes, expected " +
           std::to_string(e.bytes.size());
    return false;
  }
  if (e.tolerance > 0) {
    if (!CloseEnough(e, r, why)) return false;
  } else if (r.bytes > 0 && memcmp(r.data, e.bytes.data(), r.bytes) != 0) {
    for (uint64_t i = 0; i < r.bytes; ++i) {
      if (static_cast<const uint8_t*>(r.data)[i] != e.bytes[i]) {
        *why = "first differing byte at offset " + std::to_string(i);
        break;
      }
    }
    return false;
  }
  if (!e.splits.empty() &&
      std::vector<int64_t>(r.splits, r.splits + r.num_splits) != e.splits) {
    *why = "splits differ";
    return false;
  }
  return true;
}

void FillRequest(const Case& c, const std::vector<uint8_t>& data, const std::string& name,
                 int rank, ard_request* req) {
  req->collective = c.collective;
  req->dtype = c.dtype;
  req->reduce_op = c.op;
  req->root_rank = c.root;
  req->prescale = c.prescale;
  req->postscale = c.postscale;
  req->name = name.c_str();
  req->group_id = c.group_id;
  req->group_size = c.group_size;
  const bool tensorless = c.collective == static_cast<int>(wire::Collective::kBarrier) ||
                          c.collective == static_cast<int>(wire::Collective::kJoin);
  if (tensorless) return;
  static thread_local std::vector<int64_t> shape;
  shape = ShapeOf(c, rank);
  req->ndims = static_cast<int>(shape.size());
  req->shape = shape.data();
  req->data = data.data();
  req->bytes = data.size();
  if (!c.splits.empty()) {
    req->num_splits = static_cast<int>(c.splits[rank].size());
    req->splits = c.splits[rank].data();
  }
}

uint64_t Fnv1a(const void* data, uint64_t bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t i = 0; i < bytes; ++i) {
    h ^= static_cast<const uint8_t*>(data)[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace ard::testing
