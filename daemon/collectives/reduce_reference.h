// Test-only scalar reference for the reduction kernels (reduce_kernels.h, half_float.h), written
// independently of them: 16-bit formats are decoded with ldexp and encoded by rounding in double
// with nearbyint (the default round-to-nearest-even mode); integer wraparound is computed exactly
// in __int128 and then truncated. Slow and obvious on purpose. Pure functions.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "proto/local_wire.h"

namespace ard::collectives::reference {

using wire::DataType;
using wire::ReduceOp;

template <typename To, typename From>
To BitCast(From from) {
  static_assert(sizeof(To) == sizeof(From), "size");
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

// Encodes |f| into a 16-bit float format with `frac_bits` fraction bits and exponent range
// [emin, emax] (bias emax), rounding to nearest even. NaN is handled by the callers.
inline uint16_t EncodeFinite(float f, int frac_bits, int emin, int emax) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const uint16_t inf = static_cast<uint16_t>((2 * emax + 1) << frac_bits);
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return sign | inf;
  if (a == 0) return sign;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exponent = std::max(e - 1, emin);
  double q = std::nearbyint(std::ldexp(a, frac_bits - exponent));
  if (q >= std::ldexp(1.0, frac_bits + 1)) {  // rounded up into the next binade
    ++exponent;
    q /= 2;
  }
  if (exponent > emax) return sign | inf;
  const uint32_t qi = static_cast<uint32_t>(q);
  const uint32_t implicit = 1u << frac_bits;
  if (qi < implicit) return static_cast<uint16_t>(sign | qi);  // subnormal
  return static_cast<uint16_t>(sign | ((exponent + emax) << frac_bits) | (qi - implicit));
}

inline float HalfToFloat(uint16_t h) {
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  const bool neg = (h & 0x8000) != 0;
  if (exp == 0x1f) {
    if (mant == 0) return neg ? -INFINITY : INFINITY;
    return BitCast<float>((neg ? 0x80000000u : 0u) | 0x7fc00000u | (uint32_t(mant) << 13));
  }
  const double v = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return static_cast<float>(neg ? -v : v);
}

inline uint16_t FloatToHalf(float f) {
  if (std::isnan(f)) {
    const uint32_t bits = BitCast<uint32_t>(f);
    return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7e00u | ((bits >> 13) & 0x3ffu));
  }
  return EncodeFinite(f, 10, -14, 15);
}

inline float Bfloat16ToFloat(uint16_t b) {
  const int exp = (b >> 7) & 0xff;
  const int mant = b & 0x7f;
  const bool neg = (b & 0x8000) != 0;
  if (exp == 0xff) return BitCast<float>(uint32_t(b) << 16);  // inf, NaN: bits kept
  const double v = exp == 0 ? std::ldexp(mant, -133) : std::ldexp(128 + mant, exp - 134);
  return static_cast<float>(neg ? -v : v);
}

inline uint16_t FloatToBfloat16(float f) {
  if (std::isnan(f)) return static_cast<uint16_t>((BitCast<uint32_t>(f) >> 16) | 0x40u);
  return EncodeFinite(f, 7, -126, 127);
}

// Two's-complement wraparound of an exact result.
template <typename T>
T Wrap(__int128 exact) {
  const uint64_t low = static_cast<uint64_t>(static_cast<unsigned __int128>(exact));
  T out;
  std::memcpy(&out, &low, sizeof out);  // little-endian: the low bytes
  return out;
}

// dst op src for one element of an arithmetic type (the documented semantics).
template <typename T>
T Apply(ReduceOp op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    const __int128 x = a, y = b;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        return Wrap<T>(x + y);
      case ReduceOp::kProduct:
        return Wrap<T>(x * y);
      case ReduceOp::kMin:
        return std::min(a, b);
      case ReduceOp::kMax:
        return std::max(a, b);
      case ReduceOp::kAdasum:
        break;  // not element-wise: adasum_reference.h
    }
  } else {
    T r = 0;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        r = a + b;
        break;
      case ReduceOp::kProduct:
        r = a * b;
        break;
      case ReduceOp::kMin:
        r = (std::isnan(a) || std::isnan(b)) ? NAN : (b < a ? b : a);
        break;
      case ReduceOp::kMax:
        r = (std::isnan(a) || std::isnan(b)) ? NAN : (a < b ? b : a);
        break;
      case ReduceOp::kAdasum:
        break;  // not element-wise: adasum_reference.h
    }
    return std::isnan(r) ? std::numeric_limits<T>::quiet_NaN() : r;
  }
  return a;
}

inline uint16_t ApplyHalf(ReduceOp op, uint16_t a, uint16_t b) {
  return FloatToHalf(Apply<float>(op, HalfToFloat(a), HalfToFloat(b)));
}

inline uint16_t ApplyBfloat16(ReduceOp op, uint16_t a, uint16_t b) {
  return FloatToBfloat16(Apply<float>(op, Bfloat16ToFloat(a), Bfloat16ToFloat(b)));
}

// x * factor for one element (the documented semantics of Scale).
template <typename T>
T ScaleElement(T x, double factor) {
  if constexpr (std::is_integral_v<T>) {
    const double t = std::trunc(static_cast<double>(x) * factor);
    if (std::isnan(t)) return 0;
    if (t >= std::ldexp(1.0, std::numeric_limits<T>::digits)) return std::numeric_limits<T>::max();
    if (t < static_cast<double>(std::numeric_limits<T>::min())) {
      return std::numeric_limits<T>::min();
    }
    return static_cast<T>(t);
  } else {
    const T r = x * static_cast<T>(factor);
    return std::isnan(r) ? std::numeric_limits<T>::quiet_NaN() : r;
  }
}

inline uint16_t ScaleHalf(uint16_t x, double factor) {
  return FloatToHalf(ScaleElement<float>(HalfToFloat(x), factor));
}

inline uint16_t ScaleBfloat16(uint16_t x, double factor) {
  return FloatToBfloat16(ScaleElement<float>(Bfloat16ToFloat(x), factor));
}

// One element of any supported dtype, as raw little-endian storage: *d = op(*d, *s).
inline void ReduceBytes(DataType dtype, ReduceOp op, uint8_t* d, const uint8_t* s) {
  auto apply = [&](auto tag, auto fn) {
    decltype(tag) a, b;
    std::memcpy(&a, d, sizeof a);
    std::memcpy(&b, s, sizeof b);
    a = fn(op, a, b);
    std::memcpy(d, &a, sizeof a);
  };
  switch (dtype) {
    case DataType::kUint8:
      return apply(uint8_t{}, Apply<uint8_t>);
    case DataType::kInt8:
      return apply(int8_t{}, Apply<int8_t>);
    case DataType::kInt32:
      return apply(int32_t{}, Apply<int32_t>);
    case DataType::kInt64:
      return apply(int64_t{}, Apply<int64_t>);
    case DataType::kFloat16:
      return apply(uint16_t{}, ApplyHalf);
    case DataType::kBfloat16:
      return apply(uint16_t{}, ApplyBfloat16);
    case DataType::kFloat32:
      return apply(float{}, Apply<float>);
    case DataType::kFloat64:
      return apply(double{}, Apply<double>);
    default:
      std::abort();  // not a reduction type
  }
}

// One element of any supported dtype, as raw storage: *p = *p * factor.
inline void ScaleBytes(DataType dtype, double factor, uint8_t* p) {
  auto apply = [&](auto tag, auto fn) {
    decltype(tag) x;
    std::memcpy(&x, p, sizeof x);
    x = fn(x, factor);
    std::memcpy(p, &x, sizeof x);
  };
  switch (dtype) {
    case DataType::kUint8:
      return apply(uint8_t{}, ScaleElement<uint8_t>);
    case DataType::kInt8:
      return apply(int8_t{}, ScaleElement<int8_t>);
    case DataType::kInt32:
      return apply(int32_t{}, ScaleElement<int32_t>);
    case DataType::kInt64:
      return apply(int64_t{}, ScaleElement<int64_t>);
    case DataType::kFloat16:
      return apply(uint16_t{}, ScaleHalf);
    case DataType::kBfloat16:
      return apply(uint16_t{}, ScaleBfloat16);
    case DataType::kFloat32:
      return apply(float{}, ScaleElement<float>);
    case DataType::kFloat64:
      return apply(double{}, ScaleElement<double>);
    default:
      std::abort();  // not a reduction type
  }
}

}  // namespace ard::collectives::reference
