#include "ctl/bench_pattern.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "ctl/bench_options.h"
#include "proto/local_wire.h"

namespace ard::ctl {
namespace {

using wire::Collective;
using wire::DataType;
using wire::ReduceOp;

constexpr int kValues = 61;  // every pattern value lies in [0, kValues)

bool Integral(int dtype) {
  switch (static_cast<DataType>(dtype)) {
    case DataType::kUint8:
    case DataType::kInt8:
    case DataType::kInt32:
    case DataType::kInt64:
      return true;
    default:
      return false;
  }
}

// |f| in a 16-bit float with `frac_bits` fraction bits and exponents [emin, emax], nearest even.
uint16_t EncodeHalf(float f, int frac_bits, int emin, int emax) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  const uint16_t inf = static_cast<uint16_t>((2 * emax + 1) << frac_bits);
  if (std::isinf(a)) return sign | inf;
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);
  int exponent = std::max(e - 1, emin);
  double q = std::nearbyint(std::ldexp(a, frac_bits - exponent));
  if (q >= std::ldexp(1.0, frac_bits + 1)) {
    ++exponent;
    q /= 2;
  }
  if (exponent > emax) return sign | inf;
  const uint32_t qi = static_cast<uint32_t>(q), implicit = 1u << frac_bits;
  if (qi < implicit) return static_cast<uint16_t>(sign | qi);
  return static_cast<uint16_t>(sign | ((exponent + emax) << frac_bits) | (qi - implicit));
}

double DecodeHalf(uint16_t h, int frac_bits, int emax) {
  const int exp_bits = 15 - frac_bits;
  const int exp = (h >> frac_bits) & ((1 << exp_bits) - 1);
  const int mant = h & ((1 << frac_bits) - 1);
  double v;
  if (exp == (1 << exp_bits) - 1) {
    v = mant == 0 ? INFINITY : NAN;
  } else if (exp == 0) {
    v = std::ldexp(mant, 1 - emax - frac_bits);
  } else {
    v = std::ldexp((1 << frac_bits) + mant, exp - emax - frac_bits);
  }
  return (h & 0x8000) ? -v : v;
}

// One reduction step in the dtype's arithmetic: integers exactly then wrapped, 16-bit floats in
// float then rounded, float32 in float, float64 in double.
double Combine(int dtype, int op, double a, double b) {
  auto apply = [op](auto x, auto y) -> decltype(x) {
    switch (static_cast<ReduceOp>(op)) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        return x + y;
      case ReduceOp::kProduct:
        return x * y;
      case ReduceOp::kMin:
        return std::min(x, y);
      case ReduceOp::kMax:
        return std::max(x, y);
      case ReduceOp::kAdasum:
        break;  // not a --reduce choice
    }
    return x;
  };
  double r;
  if (Integral(dtype)) {
    r = static_cast<double>(apply(static_cast<__int128>(a), static_cast<__int128>(b)));
  } else if (static_cast<DataType>(dtype) == DataType::kFloat64) {
    r = apply(a, b);
  } else {
    r = apply(static_cast<float>(a), static_cast<float>(b));
  }
  uint8_t bytes[8];
  StoreElement(dtype, r, bytes);  // rounds or wraps into the dtype
  return LoadElement(dtype, bytes);
}

// x * factor as the daemon scales: integers truncated and saturated, floats in their type.
double Scale(int dtype, double x, double factor) {
  double r;
  if (Integral(dtype)) {
    r = std::trunc(x * factor);
    const size_t bytes = wire::DataTypeSize(dtype);
    const bool is_signed = static_cast<DataType>(dtype) != DataType::kUint8;
    const double hi = std::ldexp(1.0, 8 * bytes - (is_signed ? 1 : 0));
    const double lo = is_signed ? -hi : 0;
    if (r >= hi) r = hi - 1;
    if (r < lo) r = lo;
  } else if (static_cast<DataType>(dtype) == DataType::kFloat64) {
    r = x * factor;
  } else {
    r = static_cast<float>(x) * static_cast<float>(factor);
  }
  uint8_t bytes[8];
  StoreElement(dtype, r, bytes);
  return LoadElement(dtype, bytes);
}

// The pattern: rank r's element i, a small integer in [0, kValues). Reductions keep sums small
// (exact in bfloat16 up to 42 ranks; past that the reference rounds like the daemon) and
// products at most 14. Periods are odd, so a result shifted by a power-of-two number of elements
// (reducescatter's wrong slice, say) does not match.
int Value(const BenchPatternSpec& s, int r, uint64_t i) {
  if (!IsReduction(s.collective)) return static_cast<int>((7 * r + 3 * i) % kValues);
  switch (static_cast<ReduceOp>(s.reduce_op)) {
    case ReduceOp::kSum:
      return static_cast<int>((r + i) % 7);
    case ReduceOp::kAverage:
      return static_cast<int>((r + 2 * i) % 5);
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return static_cast<int>((5 * r + i) % 9);
    case ReduceOp::kProduct:
      return (i % s.ranks == static_cast<uint64_t>(r) ? 2 : 1) * (r == 0 ? 1 + i % 7 : 1);
    case ReduceOp::kAdasum:
      break;  // not a --reduce choice
  }
  return 0;
}

// Reductions: Value's period in i (expected values repeat with it).
uint64_t Period(const BenchPatternSpec& s) {
  switch (static_cast<ReduceOp>(s.reduce_op)) {
    case ReduceOp::kSum:
      return 7;
    case ReduceOp::kAverage:
      return 5;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return 9;
    case ReduceOp::kProduct:
      return std::lcm<uint64_t>(s.ranks, 7);
    case ReduceOp::kAdasum:
      break;  // not a --reduce choice
  }
  return 1;
}

// Every pattern value, encoded: table[v * element_bytes ...].
std::vector<uint8_t> EncodedValues(int dtype) {
  const size_t e = wire::DataTypeSize(dtype);
  std::vector<uint8_t> table(kValues * e);
  for (int v = 0; v < kValues; ++v) StoreElement(dtype, v, &table[v * e]);
  return table;
}

}  // namespace

void StoreElement(int dtype, double value, uint8_t* out) {
  auto put = [out](auto v) { std::memcpy(out, &v, sizeof v); };
  // Integers wrap: the low bytes of the two's-complement value (value is an integer there).
  auto wrapped = [value] { return static_cast<uint64_t>(static_cast<__int128>(value)); };
  switch (static_cast<DataType>(dtype)) {
    case DataType::kUint8:
      return put(static_cast<uint8_t>(wrapped()));
    case DataType::kInt8:
      return put(static_cast<uint8_t>(wrapped()));
    case DataType::kInt32:
      return put(static_cast<uint32_t>(wrapped()));
    case DataType::kInt64:
      return put(wrapped());
    case DataType::kFloat16:
      return put(EncodeHalf(static_cast<float>(value), 10, -14, 15));
    case DataType::kBfloat16:
      return put(EncodeHalf(static_cast<float>(value), 7, -126, 127));
    case DataType::kFloat32:
      return put(static_cast<float>(value));
    case DataType::kFloat64:
      return put(value);
    default:
      return;
  }
}

double LoadElement(int dtype, const uint8_t* in) {
  auto get = [in](auto v) {
    std::memcpy(&v, in, sizeof v);
    return static_cast<double>(v);
  };
  switch (static_cast<DataType>(dtype)) {
    case DataType::kUint8:
      return get(uint8_t{});
    case DataType::kInt8:
      return get(int8_t{});
    case DataType::kInt32:
      return get(int32_t{});
    case DataType::kInt64:
      return get(int64_t{});
    case DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, in, 2);
      return DecodeHalf(h, 10, 15);
    }
    case DataType::kBfloat16: {
      uint16_t h;
      std::memcpy(&h, in, 2);
      return DecodeHalf(h, 7, 127);
    }
    case DataType::kFloat32:
      return get(float{});
    case DataType::kFloat64:
      return get(double{});
    default:
      return 0;
  }
}

void FillPattern(const BenchPatternSpec& spec, int rank, std::vector<uint8_t>* input) {
  const size_t e = wire::DataTypeSize(spec.dtype);
  const std::vector<uint8_t> table = EncodedValues(spec.dtype);
  input->resize(spec.layout.input_elements * e);
  for (uint64_t i = 0; i < spec.layout.input_elements; ++i) {
    std::memcpy(input->data() + i * e, &table[Value(spec, rank, i) * e], e);
  }
}

uint64_t CountWrong(const BenchPatternSpec& spec, int rank, const uint8_t* output) {
  const size_t e = wire::DataTypeSize(spec.dtype);
  const uint64_t out = spec.layout.output_elements;
  const uint64_t block = spec.layout.count;  // allgather's input, alltoall's per-peer block
  std::vector<uint8_t> table = EncodedValues(spec.dtype);
  // The input index (and rank) an output element comes from, or reductions' residue table.
  uint64_t first = 0;  // reducescatter: this rank's first element of the reduced whole
  uint64_t period = 1;
  if (IsReduction(spec.collective)) {
    if (spec.collective == static_cast<int>(Collective::kReducescatter)) first = rank * out;
    period = Period(spec);
    table.assign(period * e, 0);
    for (uint64_t p = 0; p < period; ++p) {
      double acc = Value(spec, 0, p);
      for (int r = 1; r < spec.ranks; ++r)
        acc = Combine(spec.dtype, spec.reduce_op, acc, Value(spec, r, p));
      if (spec.reduce_op == static_cast<int>(ReduceOp::kAverage)) {
        acc = Scale(spec.dtype, acc, 1.0 / spec.ranks);
      }
      StoreElement(spec.dtype, acc, &table[p * e]);
    }
  }
  uint64_t wrong = 0;
  for (uint64_t j = 0; j < out; ++j) {
    const uint8_t* want;
    switch (static_cast<Collective>(spec.collective)) {
      case Collective::kAllgather:
        want = &table[Value(spec, j / block, j % block) * e];
        break;
      case Collective::kBroadcast:
        want = &table[Value(spec, 0, j) * e];
        break;
      case Collective::kAlltoall:
        want = &table[Value(spec, j / block, rank * block + j % block) * e];
        break;
      default:  // reductions
        want = &table[((first + j) % period) * e];
        break;
    }
    if (std::memcmp(output + j * e, want, e) != 0) ++wrong;
  }
  return wrong;
}

}  // namespace ard::ctl
