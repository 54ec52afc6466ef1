// Block conversions between arrays of a 16-bit float format and arrays of float, one variant
// per KernelIsa, for the float16/bfloat16 reduction loops. Private to reduce_kernels.cc (which
// compiles with -O3): every variant computes exactly what half_float.h computes per element, so
// all variants give bit-identical results. The portable ones are scalar loops that the compiler
// vectorizes where it can; the AVX2 ones use F16C (vcvtph2ps/vcvtps2ph) and AVX2 intrinsics.
// Pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "daemon/collectives/half_float.h"
#include "daemon/collectives/reduce_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define ARD_KERNELS_X86 1
#include <immintrin.h>
#else
#define ARD_KERNELS_X86 0
#endif

// Forces inlining into the caller, whose target attribute then decides the instruction set.
#define ARD_INLINE inline __attribute__((always_inline))
// Code for KernelIsa::kAvx2. Not FMA: results must not depend on contraction.
#define ARD_TARGET_AVX2 __attribute__((target("avx2,f16c")))

namespace ard::collectives::internal {

// Tags for the 16-bit float formats, stored as uint16_t.
struct Fp16 {};
struct Bf16 {};

struct SoftFp16 {
  static ARD_INLINE void ToFloat(const uint16_t* __restrict in, float* __restrict out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
  }
  static ARD_INLINE void FromFloat(const float* __restrict in, uint16_t* __restrict out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
  }
};

struct SoftBf16 {
  static ARD_INLINE void ToFloat(const uint16_t* __restrict in, float* __restrict out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = Bfloat16ToFloat(in[i]);
  }
  static ARD_INLINE void FromFloat(const float* __restrict in, uint16_t* __restrict out, size_t n) {
    for (size_t i = 0; i < n; ++i) out[i] = FloatToBfloat16(in[i]);
  }
};

#if ARD_KERNELS_X86
// Not always_inline: GCC cannot inline AVX2 code into the target-neutral loop templates, so these
// stay calls (one per block).
struct F16cFp16 {
  static ARD_TARGET_AVX2 void ToFloat(const uint16_t* __restrict in, float* __restrict out,
                                      size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
  }
  static ARD_TARGET_AVX2 void FromFloat(const float* __restrict in, uint16_t* __restrict out,
                                        size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
    }
    for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
  }
};

// bfloat16 with AVX2 intrinsics: what FloatToBfloat16 computes, with fewer instructions than
// the auto-vectorized form (which needs unsigned compares and 16-bit unpacking).
struct Avx2Bf16 {
  static ARD_TARGET_AVX2 void ToFloat(const uint16_t* __restrict in, float* __restrict out,
                                      size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256i w =
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(w, 16));
    }
    for (; i < n; ++i) out[i] = Bfloat16ToFloat(in[i]);
  }
  static ARD_TARGET_AVX2 __m256i Round(__m256 f) {
    const __m256i x = _mm256_castps_si256(f);
    const __m256i hi = _mm256_srli_epi32(x, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), lsb), 16);
    const __m256i nan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    const __m256i abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff));
    const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(rounded, nan, is_nan);
  }
  static ARD_TARGET_AVX2 void FromFloat(const float* __restrict in, uint16_t* __restrict out,
                                        size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m256i lo = Round(_mm256_loadu_ps(in + i));
      const __m256i hi = Round(_mm256_loadu_ps(in + i + 8));
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
    }
    for (; i < n; ++i) out[i] = FloatToBfloat16(in[i]);
  }
};
#endif

// The converter for format T (Fp16 or Bf16) under instruction set kIsa.
template <typename T, KernelIsa kIsa>
struct BlockConverter;
template <>
struct BlockConverter<Bf16, KernelIsa::kPortable> {
  using Type = SoftBf16;
};
template <>
struct BlockConverter<Fp16, KernelIsa::kPortable> {
  using Type = SoftFp16;
};
#if ARD_KERNELS_X86
template <>
struct BlockConverter<Fp16, KernelIsa::kAvx2> {
  using Type = F16cFp16;
};
template <>
struct BlockConverter<Bf16, KernelIsa::kAvx2> {
  using Type = Avx2Bf16;
};
#endif

}  // namespace ard::collectives::internal
