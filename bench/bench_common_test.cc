#include "bench/bench_common.h"

#include <catch2/catch.hpp>
#include <vector>

TEST_CASE("sizes: a doubling range is inclusive and takes K/M/G suffixes") {
  uint64_t sizes[kArdBenchMaxSizes];
  REQUIRE(ArdBenchParseSizes("4:64", sizes, kArdBenchMaxSizes) == 5);
  CHECK(sizes[0] == 4);
  CHECK(sizes[4] == 64);
  REQUIRE(ArdBenchParseSizes("4:256M", sizes, kArdBenchMaxSizes) == 27);
  CHECK(sizes[26] == 256ull << 20);
  REQUIRE(ArdBenchParseSizes("1K,16M,1G", sizes, kArdBenchMaxSizes) == 3);
  CHECK(sizes[0] == 1024);
  CHECK(sizes[1] == 16ull << 20);
  CHECK(sizes[2] == 1ull << 30);
}

TEST_CASE("sizes: malformed lists are rejected") {
  uint64_t sizes[kArdBenchMaxSizes];
  CHECK(ArdBenchParseSizes("", sizes, kArdBenchMaxSizes) == -1);
  CHECK(ArdBenchParseSizes("4X", sizes, kArdBenchMaxSizes) == -1);
  CHECK(ArdBenchParseSizes("64:4", sizes, kArdBenchMaxSizes) == -1);
  CHECK(ArdBenchParseSizes("4,,8", sizes, kArdBenchMaxSizes) == -1);
  CHECK(ArdBenchParseSizes("1:1G", sizes, 4) == -1);  // more sizes than room
}

TEST_CASE("flags: both --flag value and --flag=value forms") {
  ArdBenchOptions o;
  ArdBenchDefaults(&o);
  CHECK(o.num_sizes == 27);
  const char* args[] = {"prog", "--iters", "7", "--warmup=2", "--check", "--sizes=1K", "--np"};
  char** argv = const_cast<char**>(args);
  int i = 1;
  CHECK(ArdBenchParseFlag(7, argv, &i, &o) == 1);
  CHECK(i == 2);
  i = 3;
  CHECK(ArdBenchParseFlag(7, argv, &i, &o) == 1);
  i = 4;
  CHECK(ArdBenchParseFlag(7, argv, &i, &o) == 1);
  i = 5;
  CHECK(ArdBenchParseFlag(7, argv, &i, &o) == 1);
  i = 6;
  CHECK(ArdBenchParseFlag(7, argv, &i, &o) == 0);
  CHECK(o.iters == 7);
  CHECK(o.warmup == 2);
  CHECK(o.check == 1);
  CHECK(o.num_sizes == 1);
  CHECK(o.sizes[0] == 1024);
}

TEST_CASE("pattern: the sum over ranks passes, a result shifted by one element does not") {
  const int ranks = 4, count = 1000;
  std::vector<float> sum(count + 1, 0.0f);
  for (int r = 0; r < ranks; ++r) {
    for (int i = 0; i <= count; ++i) sum[i] += ArdBenchPattern(r, i);
  }
  CHECK(ArdBenchCountWrong(sum.data(), count, ranks) == 0);
  CHECK(ArdBenchCountWrong(sum.data() + 1, count, ranks) > count / 2);
  CHECK(ArdBenchCountWrong(sum.data(), count, ranks - 1) == count);
}
