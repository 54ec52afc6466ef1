#include "daemon/dataplane/tcp/crc32c.h"

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

}  // namespace
}  // namespace ard::dataplane::tcp
