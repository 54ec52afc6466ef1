#include "ctl/bench_layout.h"

#include "catch2/catch.hpp"

namespace ard::ctl {
namespace {

constexpr int kAllreduce = 1, kAllgather = 2, kBroadcast = 3, kAlltoall = 4, kReducescatter = 5;

TEST_CASE("busbw factors are nccl-tests'") {
  CHECK(BusBandwidthFactor(kAllreduce, 2) == Approx(1.0));
  CHECK(BusBandwidthFactor(kAllreduce, 4) == Approx(1.5));
  CHECK(BusBandwidthFactor(kAllgather, 4) == Approx(0.75));
  CHECK(BusBandwidthFactor(kReducescatter, 2) == Approx(0.5));
  CHECK(BusBandwidthFactor(kAlltoall, 8) == Approx(0.875));
  CHECK(BusBandwidthFactor(kBroadcast, 4) == Approx(1.0));
  CHECK(BusBandwidthFactor(kAllreduce, 1) == Approx(0.0));
}

TEST_CASE("allreduce and broadcast: input = output = size, count = all elements") {
  for (int op : {kAllreduce, kBroadcast}) {
    BenchLayout l = LayoutFor(op, 1026, 4, 3);  // rounded down to whole floats
    CHECK(l.size_bytes == 1024);
    CHECK(l.count == 256);
    CHECK(l.input_elements == 256);
    CHECK(l.output_elements == 256);
  }
}

TEST_CASE("allgather: size is the gathered output, count one rank's input") {
  BenchLayout l = LayoutFor(kAllgather, 4096, 4, 4);
  CHECK(l.size_bytes == 4096);
  CHECK(l.count == 256);
  CHECK(l.input_elements == 256);
  CHECK(l.output_elements == 1024);
  CHECK(LayoutFor(kAllgather, 100, 4, 3).size_bytes == 96);  // 8 floats per rank
}

TEST_CASE("reducescatter: size is the input, count one rank's output") {
  BenchLayout l = LayoutFor(kReducescatter, 4096, 2, 4);
  CHECK(l.size_bytes == 4096);
  CHECK(l.count == 512);
  CHECK(l.input_elements == 2048);
  CHECK(l.output_elements == 512);
}

TEST_CASE("alltoall: input = output = size, count one peer's block") {
  BenchLayout l = LayoutFor(kAlltoall, 1000, 8, 3);  // 125 doubles -> 41 per peer
  CHECK(l.count == 41);
  CHECK(l.input_elements == 123);
  CHECK(l.output_elements == 123);
  CHECK(l.size_bytes == 984);
}

TEST_CASE("sizes that round to nothing are skipped, as are repeats") {
  CHECK(LayoutFor(kAllreduce, 4, 8, 2).size_bytes == 0);
  CHECK(LayoutFor(kAllgather, 4, 4, 2).size_bytes == 0);
  std::vector<BenchLayout> ls = LayoutsFor(kAllgather, {4, 8, 16, 17, 32}, 4, 2);
  REQUIRE(ls.size() == 3);
  CHECK(ls[0].size_bytes == 8);
  CHECK(ls[1].size_bytes == 16);
  CHECK(ls[2].size_bytes == 32);
}

}  // namespace
}  // namespace ard::ctl
