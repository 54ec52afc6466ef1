#include "daemon/dataplane/tcp/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace ard::dataplane::tcp {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78;  // CRC32C, reflected

std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
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
// a * b mod the polynomial, both in the reflected representation (bit 31 is x^0).
uint32_t MultiplyModPolynomial(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t bit = 0x80000000u; bit != 0;
       bit >>= 1, b = (b & 1) ? (b >> 1) ^ kPolynomial : b >> 1) {
    if (a & bit) product ^= b;
  }
  return product;
}

// x^(8 * bytes) mod the polynomial: multiplying a CRC register by it is the same as running it
// over `bytes` zero bytes.
uint32_t ZeroBytesOperator(size_t bytes) {
  uint32_t x_power = 0x80000000u;  // x^0
  for (size_t bit = 0; bit < 8 * bytes; ++bit) {
    x_power = (x_power & 1) ? (x_power >> 1) ^ kPolynomial : x_power >> 1;
  }
  return x_power;
}

// Runs a CRC register over a fixed number of zero bytes in four table lookups: that is linear in
// the register, so it is the xor of what it does to each of the register's four bytes.
class ZeroBytesShift {
 public:
  explicit ZeroBytesShift(size_t bytes) {
    const uint32_t op = ZeroBytesOperator(bytes);
    for (uint32_t byte = 0; byte < 4; ++byte) {
      for (uint32_t v = 0; v < 256; ++v) {
        table_[byte][v] = MultiplyModPolynomial(v << (8 * byte), op);
      }
    }
  }
  uint32_t operator()(uint32_t c) const {
    return table_[0][c & 0xff] ^ table_[1][(c >> 8) & 0xff] ^ table_[2][(c >> 16) & 0xff] ^
           table_[3][c >> 24];
  }

 private:
  uint32_t table_[4][256];
};

inline uint64_t Load64(const uint8_t* p) {
  uint64_t word;
  std::memcpy(&word, p, 8);
  return word;
}

// The crc32 instruction takes 3 cycles and can start one per cycle: one chain over the bytes runs
// at a third of the instruction's throughput. Three chains over three consecutive stripes run
// side by side, and their registers join by the linearity of the CRC: the first one's register
// moved past 2 stripes of zeros, the second's past one, and the third's, xor-ed.
template <size_t kStripe>
__attribute__((target("sse4.2"))) uint64_t ThreeStripes(uint64_t c, const uint8_t*& p, size_t& n) {
  static_assert(kStripe % 8 == 0);
  static const ZeroBytesShift past_one(kStripe);
  static const ZeroBytesShift past_two(2 * kStripe);
  for (; n >= 3 * kStripe; n -= 3 * kStripe, p += 3 * kStripe) {
    uint64_t c1 = 0, c2 = 0;
    for (size_t i = 0; i < kStripe; i += 8) {
      c = _mm_crc32_u64(c, Load64(p + i));
      c1 = _mm_crc32_u64(c1, Load64(p + kStripe + i));
      c2 = _mm_crc32_u64(c2, Load64(p + 2 * kStripe + i));
    }
    c = past_two(static_cast<uint32_t>(c)) ^ past_one(static_cast<uint32_t>(c1)) ^
        static_cast<uint32_t>(c2);
  }
  return c;
}

__attribute__((target("sse4.2"))) uint32_t HardwareCrc(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = ThreeStripes<4096>(crc, p, n);
  c = ThreeStripes<256>(c, p, n);
  for (; n >= 8; n -= 8, p += 8) c = _mm_crc32_u64(c, Load64(p));
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}

bool HasSse42() {
  // __builtin_cpu_init first: this may run before the runtime's own initialization of the flags.
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("sse4.2") != 0;
  }();
  return has;
}
#endif

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t bytes) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (HasSse42()) return ~HardwareCrc(crc, p, bytes);
#endif
  return ~TableCrc(crc, p, bytes);
}

}  // namespace ard::dataplane::tcp
