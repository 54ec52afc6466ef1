// Conversions between float and the two 16-bit float formats the daemon reduces: IEEE binary16
// ("float16", 1+5+10 bits) and bfloat16 (1+8+7 bits, the top half of a float). Scalar and
// inline, written with selects instead of branches so that loops over them can auto-vectorize
// (FloatToHalf needs AVX2's per-lane shifts). The reduction kernels (reduce_kernels.h) use them
// in their portable variant and for block tails; their AVX2 variant uses F16C and intrinsics
// that give the same bits (half_blocks.h). Pure functions: safe from any thread.
//
// Semantics (all exact or correctly rounded, independent of the FPU's rounding mode and of the
// FTZ/DAZ flags, because only integer operations and exact float operations are used):
// - To float: exact. Subnormals become normal floats. float16 NaNs get the quiet bit set and keep
//   their payload (as x86 F16C's vcvtph2ps does); bfloat16 is a plain 16-bit shift (bits kept).
// - From float: round to nearest, ties to even; values past the largest finite value round to
//   infinity; results below the smallest normal are subnormals (or zero), also rounded to nearest
//   even. NaN stays NaN: sign and the top payload bits are kept and the quiet bit is set (for
//   float16 this is exactly vcvtps2ph's result, so F16C and these functions agree bit for bit).
#pragma once

#include <cstdint>
#include <cstring>

namespace ard::collectives {

namespace half_internal {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace half_internal

inline float HalfToFloat(uint16_t h) {
  using half_internal::BitsToFloat;
  using half_internal::FloatBits;
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  // Normal: rebias the exponent from 15 to 127.
  uint32_t bits = ((exp + 112u) << 23) | (mant << 13);
  // Zero or subnormal: mant * 2^-24 is exact in float.
  const uint32_t sub = FloatBits(static_cast<float>(static_cast<int32_t>(mant)) * 0x1p-24f);
  bits = exp == 0 ? sub : bits;
  // Infinity, or NaN with the quiet bit forced on.
  const uint32_t special = 0x7f800000u | (mant << 13) | (mant != 0 ? 0x400000u : 0u);
  bits = exp == 0x1f ? special : bits;
  return BitsToFloat(sign | bits);
}

inline uint16_t FloatToHalf(float f) {
  const uint32_t x = half_internal::FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  // Normal range [2^-14, 65520): rebias the exponent from 127 to 15, then round to nearest even
  // at bit 13. A carry out of the mantissa correctly bumps the exponent.
  const uint32_t r = a - (112u << 23);
  uint32_t h = (r + 0xfffu + ((r >> 13) & 1u)) >> 13;
  // Below 2^-14: the subnormal half is round(|f| * 2^24) = m * 2^(e - 126), i.e. the 24-bit
  // significand shifted right by 126 - e (>= 14), rounded to nearest even. A shift of 25 or more
  // always gives 0 (float subnormals included), so the shift is capped at 25.
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e < 25u ? 126u - e : 25u;
  const uint32_t half_ulp = 1u << (shift - 1u);
  const uint32_t sub = (m + (half_ulp - 1u) + ((m >> shift) & 1u)) >> shift;
  h = a < 0x38800000u ? sub : h;
  // 65520 (halfway between 65504 and 65536) and above: infinity (ties to even go up here).
  h = a >= 0x477ff000u ? 0x7c00u : h;
  // NaN: quiet, with the top 9 payload bits (vcvtps2ph semantics).
  h = a > 0x7f800000u ? (0x7e00u | ((a >> 13) & 0x3ffu)) : h;
  return static_cast<uint16_t>(sign | h);
}

inline float Bfloat16ToFloat(uint16_t b) {
  return half_internal::BitsToFloat(static_cast<uint32_t>(b) << 16);
}

inline uint16_t FloatToBfloat16(float f) {
  const uint32_t x = half_internal::FloatBits(f);
  // Round to nearest even at bit 16; overflow carries into the exponent and yields infinity.
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  // NaN: keep sign and top payload bits, force the quiet bit (a payload only in the low 16 bits
  // would otherwise truncate to infinity).
  const uint32_t nan = (x >> 16) | 0x40u;
  return static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

}  // namespace ard::collectives
