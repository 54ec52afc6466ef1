#include "daemon/dataplane/tcp/crc32c.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "catch2/catch.hpp"

namespace ard::dataplane::tcp {
namespace {

TEST_CASE("Crc32cExtend gives the standard CRC32C values") {
  CHECK(Crc32cExtend(0, "", 0) == 0);
  CHECK(Crc32cExtend(0, "123456789", 9) == 0xe3069283);  // the CRC32C check value
  const std::string zeros(32, '\0');
  CHECK(Crc32cExtend(0, zeros.data(), zeros.size()) == 0x8a9136aa);  // RFC 3720 B.4
}

TEST_CASE("Crc32cExtend over pieces equals the CRC of the whole, and sees one flipped bit") {
  std::string data(1000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 37 + 11);
  const uint32_t whole = Crc32cExtend(0, data.data(), data.size());
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    CHECK(Crc32cExtend(Crc32cExtend(0, data.data(), cut), data.data() + cut, data.size() - cut) ==
          whole);
  }
  data[613] ^= 0x10;
  CHECK(Crc32cExtend(0, data.data(), data.size()) != whole);
}

TEST_CASE(
    "Crc32cExtend over long buffers (folded) equals it over short pieces (crc32 instruction)") {
  // Pieces under 128 bytes take the crc32 instruction alone; a whole buffer is folded 64 and 16
  // bytes at a time first, from a zero register and from another. Lengths around those edges,
  // unaligned starts included.
  std::string data(40000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
  for (size_t start : {0, 1, 5, 8}) {
    for (size_t length : {size_t{127}, size_t{128}, size_t{129}, size_t{191}, size_t{207},
                          size_t{767}, size_t{12289}, data.size() - 8}) {
      const char* p = data.data() + start;
      uint32_t by_pieces = 0;
      for (size_t at = 0; at < length; at += 100) {
        by_pieces = Crc32cExtend(by_pieces, p + at, std::min<size_t>(100, length - at));
      }
      CHECK(Crc32cExtend(0, p, length) == by_pieces);
      CHECK(Crc32cExtend(Crc32cExtend(0, p, 5), p + 5, length - 5) == by_pieces);
    }
  }
}

}  // namespace
}  // namespace ard::dataplane::tcp
