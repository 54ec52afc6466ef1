#include "daemon/dataplane/tcp/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ard::dataplane::tcp {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78;  // CRC32C, reflected

// c * x mod the polynomial, reflected (bit 31 is x^0): one bit of the CRC register's shift.
constexpr uint32_t TimesX(uint32_t c) { return (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1; }

std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = TimesX(c);
    table[i] = c;
  }
  return table;
}

uint32_t TableCrc(uint32_t crc, const uint8_t* p, size_t n) {
  static const std::array<uint32_t, 256> table = MakeTable();
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
// x^bits mod the polynomial, reflected (bit 31 is x^0), moved to the top half of a 64-bit
// reflected operand of pclmulqdq (bit 63 is x^0).
uint64_t XPowerOperand(size_t bits) {
  uint32_t x_power = 0x80000000u;  // x^0
  for (size_t i = 0; i < bits; ++i) x_power = TimesX(x_power);
  return static_cast<uint64_t>(x_power) << 32;
}

// The constants that move a 16-byte lane `distance` bits later in the message (see FoldedCrc).
__m128i FoldConstants(size_t distance) {
  // Bits 0-63 of a lane are its x^127..x^64, bits 64-127 its x^63..x^0; a carry-less product of
  // reflected operands comes out one degree low, hence the -1.
  return _mm_set_epi64x(static_cast<long long>(XPowerOperand(distance - 1)),
                        static_cast<long long>(XPowerOperand(distance + 64 - 1)));
}

__attribute__((target("pclmul,sse4.2"))) inline __m128i Fold(__m128i lane, __m128i constants) {
  return _mm_xor_si128(_mm_clmulepi64_si128(lane, constants, 0x00),
                       _mm_clmulepi64_si128(lane, constants, 0x11));
}

inline __m128i LoadLane(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// CRC by folding (carry-less multiplication, as Intel's white paper on PCLMULQDQ describes): the
// message is a polynomial, and the CRC depends on it only modulo the CRC polynomial, so a 16-byte
// lane followed by D bits may be replaced by its product with x^D mod P, a 96-bit value added to
// the lane D bits later. Four lanes fold 64 bytes ahead at a time, then into each other, then the
// crc32 instruction reduces the last lane and takes the bytes left. The starting register goes
// into the first four bytes (the same thing for a CRC). Needs `n` >= 64 (HardwareCrc folds from
// 128, where it starts to pay); leaves what is left in `p`/`n`.
__attribute__((target("pclmul,sse4.2"))) uint32_t FoldedCrc(uint32_t crc, const uint8_t*& p,
                                                            size_t& n) {
  static const __m128i by_64_bytes = FoldConstants(512);
  static const __m128i by_16_bytes = FoldConstants(128);
  __m128i x0 = _mm_xor_si128(LoadLane(p), _mm_cvtsi32_si128(static_cast<int>(crc)));
  __m128i x1 = LoadLane(p + 16), x2 = LoadLane(p + 32), x3 = LoadLane(p + 48);
  for (p += 64, n -= 64; n >= 64; p += 64, n -= 64) {
    x0 = _mm_xor_si128(Fold(x0, by_64_bytes), LoadLane(p));
    x1 = _mm_xor_si128(Fold(x1, by_64_bytes), LoadLane(p + 16));
    x2 = _mm_xor_si128(Fold(x2, by_64_bytes), LoadLane(p + 32));
    x3 = _mm_xor_si128(Fold(x3, by_64_bytes), LoadLane(p + 48));
  }
  x1 = _mm_xor_si128(Fold(x0, by_16_bytes), x1);
  x2 = _mm_xor_si128(Fold(x1, by_16_bytes), x2);
  x3 = _mm_xor_si128(Fold(x2, by_16_bytes), x3);
  for (; n >= 16; p += 16, n -= 16) x3 = _mm_xor_si128(Fold(x3, by_16_bytes), LoadLane(p));
  uint64_t c = _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(x3)));
  return static_cast<uint32_t>(_mm_crc32_u64(c, static_cast<uint64_t>(_mm_extract_epi64(x3, 1))));
}

__attribute__((target("pclmul,sse4.2"))) uint32_t HardwareCrc(uint32_t crc, const uint8_t* p,
                                                              size_t n) {
  if (n >= 128) crc = FoldedCrc(crc, p, n);
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}

bool HasCrcInstructions() {
  // __builtin_cpu_init first: this may run before the runtime's own initialization of the flags.
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0 && __builtin_cpu_supports("pclmul") != 0;
  }();
  return has;
}
#endif

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t bytes) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (HasCrcInstructions()) return ~HardwareCrc(crc, p, bytes);
#endif
  return ~TableCrc(crc, p, bytes);
}

}  // namespace ard::dataplane::tcp
