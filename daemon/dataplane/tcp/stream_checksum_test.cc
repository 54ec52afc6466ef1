#include "daemon/dataplane/tcp/stream_checksum.h"

#include <algorithm>
#include <string>

#include "catch2/catch.hpp"

#define XXH_INLINE_ALL  // this file's own XXH3, its default (SSE2) kernel
#include <xxhash.h>

namespace ard::dataplane::tcp {
namespace {

std::string Pattern(size_t bytes) {
  std::string data(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<char>((i * 2654435761u) >> 13);
  return data;
}

uint64_t Whole(uint64_t seed, const std::string& data) {
  StreamChecksum sum;
  sum.Reset(seed);
  sum.Extend(data.data(), data.size());
  return sum.Value();
}

TEST_CASE("StreamChecksum gives XXH3's 64-bit values") {
  // XXH3_64bits of the empty input and of "123456789", seed 0, as Debian's xxhsum prints them
  // (`printf 123456789 | xxhsum -H3`, package xxhash).
  CHECK(Whole(0, "") == 0x2d06800538d394c2ull);
  CHECK(Whole(0, "123456789") == 0x72dcb18b67a17dffull);
  StreamChecksum fresh;  // a new one is seeded with 0
  CHECK(fresh.Value() == 0x2d06800538d394c2ull);
  CHECK(Whole(1, "") != Whole(0, ""));
}

TEST_CASE("StreamChecksum over pieces equals it over the whole, and sees one flipped bit") {
  // XXH3 treats inputs up to 240 bytes, its 64-byte stripes and its 1 KiB blocks differently:
  // lengths around those edges, cut anywhere, unaligned starts included.
  const std::string data = Pattern(40000);
  for (size_t start : {0, 1, 5}) {
    for (size_t length : {size_t{16}, size_t{240}, size_t{241}, size_t{1024}, size_t{1025},
                          size_t{12289}, data.size() - 8}) {
      const std::string piece = data.substr(start, length);
      const uint64_t whole = Whole(7, piece);
      for (size_t step : {size_t{1}, size_t{63}, size_t{100}, size_t{4096}}) {
        if (step == 1 && length > 2000) continue;
        StreamChecksum sum;
        sum.Reset(7);
        for (size_t at = 0; at < length; at += step) {
          sum.Extend(piece.data() + at, std::min(step, length - at));
        }
        CHECK(sum.Value() == whole);
      }
      std::string flipped = piece;
      flipped[length / 2] ^= 0x10;
      CHECK(Whole(7, flipped) != whole);
      CHECK(Whole(7, piece.substr(0, length - 1)) != whole);  // truncated
      CHECK(Whole(8, piece) != whole);                        // another transfer's seed
    }
  }
}

TEST_CASE("StreamChecksum (AVX2 where the CPU has it) agrees with XXH3's default kernel") {
  const std::string data = Pattern(100000);
  for (size_t length : {size_t{0}, size_t{100}, size_t{1000}, size_t{5000}, data.size()}) {
    for (uint64_t seed : {uint64_t{0}, uint64_t{3}, ~uint64_t{0}}) {
      CHECK(Whole(seed, data.substr(0, length)) == XXH3_64bits_withSeed(data.data(), length, seed));
    }
  }
}

}  // namespace
}  // namespace ard::dataplane::tcp
