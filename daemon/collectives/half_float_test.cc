#include "daemon/collectives/half_float.h"

#include <cmath>
#include <cstdint>
#include <random>

#include "catch2/catch.hpp"
#include "daemon/collectives/reduce_reference.h"

namespace ard::collectives {
namespace {

using reference::BitCast;

uint32_t Bits(float f) { return BitCast<uint32_t>(f); }
float FromBits(uint32_t u) { return BitCast<float>(u); }

TEST_CASE("HalfToFloat and Bfloat16ToFloat match the reference for all 65536 inputs") {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    INFO("input 0x" << std::hex << h);
    REQUIRE(Bits(HalfToFloat(v)) == Bits(reference::HalfToFloat(v)));
    REQUIRE(Bits(Bfloat16ToFloat(v)) == Bits(reference::Bfloat16ToFloat(v)));
  }
}

TEST_CASE("float -> 16 bit round trips every 16-bit value exactly (NaNs become quiet)") {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    INFO("input 0x" << std::hex << h);
    const bool half_nan = (v & 0x7c00) == 0x7c00 && (v & 0x3ff) != 0;
    REQUIRE(FloatToHalf(HalfToFloat(v)) == (half_nan ? (v | 0x200) : v));
    const bool bf16_nan = (v & 0x7f80) == 0x7f80 && (v & 0x7f) != 0;
    REQUIRE(FloatToBfloat16(Bfloat16ToFloat(v)) == (bf16_nan ? (v | 0x40) : v));
  }
}

// Every float near a rounding boundary of either format: each representable 16-bit value, the
// midpoints between neighbours (ties) and one float ulp either side of them.
TEST_CASE("FloatToHalf and FloatToBfloat16 match the reference at every rounding boundary") {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    const uint16_t next = static_cast<uint16_t>(h + 1);
    // float16: values and midpoints computed in double (exact), then nudged by float ulps.
    const double lo = reference::HalfToFloat(v);
    const double hi = reference::HalfToFloat(next);
    for (double center : {lo, (lo + hi) / 2}) {
      if (!std::isfinite(center)) continue;
      const uint32_t c = Bits(static_cast<float>(center));
      for (uint32_t bits : {c - 1, c, c + 1}) {
        const float f = FromBits(bits);
        INFO("float bits 0x" << std::hex << bits);
        REQUIRE(FloatToHalf(f) == reference::FloatToHalf(f));
      }
    }
    // bfloat16: the midpoint above bits b<<16 is b<<16 | 0x8000.
    const uint32_t base = static_cast<uint32_t>(h) << 16;
    for (uint32_t bits :
         {base, base + 1, base + 0x7fff, base + 0x8000, base + 0x8001, base + 0xffff}) {
      const float f = FromBits(bits);
      INFO("float bits 0x" << std::hex << bits);
      REQUIRE(FloatToBfloat16(f) == reference::FloatToBfloat16(f));
    }
  }
}

TEST_CASE("FloatToHalf and FloatToBfloat16 match the reference on random floats") {
  std::mt19937 rng(12345);
  for (int i = 0; i < 2'000'000; ++i) {
    const float f = FromBits(static_cast<uint32_t>(rng()));
    INFO("float bits 0x" << std::hex << Bits(f));
    REQUIRE(FloatToHalf(f) == reference::FloatToHalf(f));
    REQUIRE(FloatToBfloat16(f) == reference::FloatToBfloat16(f));
  }
}

TEST_CASE("float16 rounding: ties to even, subnormals, overflow") {
  CHECK(FloatToHalf(1.0f) == 0x3c00);
  CHECK(FloatToHalf(1.0f + 0x1p-11f) == 0x3c00);             // tie, 0x3c00 is even
  CHECK(FloatToHalf(1.0f + 3 * 0x1p-11f) == 0x3c02);         // tie, rounds up to even
  CHECK(FloatToHalf(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01);  // just above the tie
  CHECK(FloatToHalf(0x1p-24f) == 0x0001);                    // smallest subnormal
  CHECK(FloatToHalf(0x1p-25f) == 0x0000);                    // tie with 0: even is 0
  CHECK(FloatToHalf(0x1p-25f + 0x1p-40f) == 0x0001);
  CHECK(FloatToHalf(3 * 0x1p-25f) == 0x0002);         // 1.5 ulp: tie to even 2
  CHECK(FloatToHalf(-0x1p-26f) == 0x8000);            // underflow keeps the sign
  CHECK(FloatToHalf(0x1p-14f - 0x1p-25f) == 0x0400);  // rounds up to the smallest normal
  CHECK(FloatToHalf(1e-45f) == 0x0000);               // float subnormal
  CHECK(FloatToHalf(65504.0f) == 0x7bff);
  CHECK(FloatToHalf(65519.99f) == 0x7bff);
  CHECK(FloatToHalf(65520.0f) == 0x7c00);  // tie rounds to even = inf
  CHECK(FloatToHalf(-1e10f) == 0xfc00);
  CHECK(FloatToHalf(INFINITY) == 0x7c00);
  CHECK(FloatToHalf(-0.0f) == 0x8000);
  CHECK(HalfToFloat(0x0001) == 0x1p-24f);
  CHECK(HalfToFloat(0x03ff) == 1023 * 0x1p-24f);
  CHECK(HalfToFloat(0x7bff) == 65504.0f);
}

TEST_CASE("float16 and bfloat16 NaNs stay NaN, quiet, with sign and top payload bits") {
  CHECK(FloatToHalf(FromBits(0x7f800001)) == 0x7e00);  // payload only in low bits: still NaN
  CHECK(FloatToHalf(FromBits(0xffc00000)) == 0xfe00);
  CHECK(FloatToHalf(FromBits(0x7f802000)) == 0x7e01);
  CHECK(Bits(HalfToFloat(0x7c01)) == 0x7fc02000u);  // signaling half NaN becomes quiet
  CHECK(FloatToBfloat16(FromBits(0x7f800001)) == 0x7fc0);
  CHECK(FloatToBfloat16(FromBits(0xff810000)) == 0xffc1);
  CHECK(std::isnan(Bfloat16ToFloat(0x7f81)));
}

TEST_CASE("bfloat16 rounding: ties to even, subnormals, overflow") {
  CHECK(FloatToBfloat16(1.0f) == 0x3f80);
  CHECK(FloatToBfloat16(1.0f + 0x1p-8f) == 0x3f80);      // tie, even
  CHECK(FloatToBfloat16(1.0f + 3 * 0x1p-8f) == 0x3f82);  // tie, up to even
  CHECK(FloatToBfloat16(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);
  CHECK(FloatToBfloat16(FromBits(0x00018000)) == 0x0002);  // subnormal tie, up to even
  CHECK(FloatToBfloat16(FromBits(0x7f7fffff)) == 0x7f80);  // max float rounds to inf
  CHECK(FloatToBfloat16(FromBits(0xff7f7fff)) == 0xff7f);
  CHECK(FloatToBfloat16(-INFINITY) == 0xff80);
}

}  // namespace
}  // namespace ard::collectives
