#include "ctl/bench_pattern.h"

#include <algorithm>
#include <cstring>

#include "catch2/catch.hpp"
#include "proto/local_wire.h"

namespace ard::ctl {
namespace {

constexpr int kAllreduce = 1, kAllgather = 2, kBroadcast = 3, kAlltoall = 4, kReducescatter = 5;
constexpr int kSum = 1, kAverage = 2, kMax = 4, kProduct = 5;
constexpr int kUint8 = 1, kInt8 = 2, kInt32 = 5, kFloat16 = 7, kBfloat16 = 8, kFloat32 = 9,
              kFloat64 = 10;

BenchPatternSpec Spec(int collective, int dtype, int op, int ranks, uint64_t bytes) {
  BenchPatternSpec s;
  s.collective = collective;
  s.dtype = dtype;
  s.reduce_op = op;
  s.ranks = ranks;
  s.layout = LayoutFor(collective, bytes, wire::DataTypeSize(dtype), ranks);
  return s;
}

std::vector<std::vector<uint8_t>> Inputs(const BenchPatternSpec& s) {
  std::vector<std::vector<uint8_t>> in(s.ranks);
  for (int r = 0; r < s.ranks; ++r) FillPattern(s, r, &in[r]);
  return in;
}

template <typename T>
T At(const std::vector<uint8_t>& v, size_t i) {
  T x;
  std::memcpy(&x, v.data() + i * sizeof(T), sizeof(T));
  return x;
}

uint16_t Bits16(int dtype, double v) {
  uint8_t b[8];
  StoreElement(dtype, v, b);
  uint16_t h;
  std::memcpy(&h, b, 2);
  return h;
}

TEST_CASE("element encoding: nearest even for 16-bit floats, wraparound for integers") {
  CHECK(Bits16(kFloat16, 1.0) == 0x3c00);
  CHECK(Bits16(kFloat16, 65504) == 0x7bff);
  CHECK(Bits16(kFloat16, 2049) == 0x6800);  // tie: to even (2048)
  CHECK(Bits16(kFloat16, 1.0 / 3) == 0x3555);
  CHECK(Bits16(kBfloat16, 1.0) == 0x3f80);
  CHECK(Bits16(kBfloat16, 1.0 / 3) == 0x3eab);
  uint8_t b[8];
  StoreElement(kInt8, 130, b);
  CHECK(LoadElement(kInt8, b) == -126);
  StoreElement(kUint8, 300, b);
  CHECK(LoadElement(kUint8, b) == 44);
  for (int dtype : {kFloat16, kBfloat16, kFloat32, kFloat64, kInt32}) {
    StoreElement(dtype, 37, b);
    CHECK(LoadElement(dtype, b) == 37);
  }
}

TEST_CASE("float32 sum over 2 ranks: a correct result passes, one bad element is counted") {
  BenchPatternSpec s = Spec(kAllreduce, kFloat32, kSum, 2, 4096);
  auto in = Inputs(s);
  std::vector<uint8_t> out(in[0].size());
  for (size_t i = 0; i < s.layout.output_elements; ++i) {
    float x = At<float>(in[0], i) + At<float>(in[1], i);
    std::memcpy(out.data() + 4 * i, &x, 4);
  }
  CHECK(CountWrong(s, 0, out.data()) == 0);
  CHECK(CountWrong(s, 1, out.data()) == 0);
  out[4 * 17] ^= 1;
  CHECK(CountWrong(s, 0, out.data()) == 1);
  CHECK(CountWrong(s, 0, in[0].data()) > 0);  // one rank's input is not the sum
}

TEST_CASE("product is 2 * (1 + i % 7); max is the largest input") {
  BenchPatternSpec p = Spec(kAllreduce, kInt8, kProduct, 4, 256);
  std::vector<uint8_t> out(256);
  for (size_t i = 0; i < out.size(); ++i) out[i] = 2 * (1 + i % 7);
  CHECK(CountWrong(p, 3, out.data()) == 0);
  out[5] = 2;
  CHECK(CountWrong(p, 3, out.data()) == 1);
  BenchPatternSpec m = Spec(kAllreduce, kUint8, kMax, 3, 100);
  auto in = Inputs(m);
  std::vector<uint8_t> max(100);
  for (size_t i = 0; i < 100; ++i) max[i] = std::max({in[0][i], in[1][i], in[2][i]});
  CHECK(CountWrong(m, 0, max.data()) == 0);
}

TEST_CASE("int32 average over 3 ranks truncates the mean") {
  BenchPatternSpec s = Spec(kAllreduce, kInt32, kAverage, 3, 400);
  auto in = Inputs(s);
  std::vector<uint8_t> out(in[0].size());
  for (size_t i = 0; i < s.layout.output_elements; ++i) {
    int32_t x = (At<int32_t>(in[0], i) + At<int32_t>(in[1], i) + At<int32_t>(in[2], i)) / 3;
    std::memcpy(out.data() + 4 * i, &x, 4);
  }
  CHECK(CountWrong(s, 2, out.data()) == 0);
}

TEST_CASE("reducescatter: each rank checks its slice of the sum") {
  BenchPatternSpec s = Spec(kReducescatter, kFloat64, kSum, 2, 1024);  // 128 in, 64 out
  auto in = Inputs(s);
  for (int rank : {0, 1}) {
    std::vector<uint8_t> out(s.layout.output_elements * 8);
    for (size_t j = 0; j < s.layout.output_elements; ++j) {
      const size_t i = rank * s.layout.output_elements + j;
      double x = At<double>(in[0], i) + At<double>(in[1], i);
      std::memcpy(out.data() + 8 * j, &x, 8);
    }
    CHECK(CountWrong(s, rank, out.data()) == 0);
    CHECK(CountWrong(s, 1 - rank, out.data()) > 0);
  }
}

TEST_CASE("allgather is the inputs in rank order") {
  BenchPatternSpec s = Spec(kAllgather, kFloat16, kSum, 3, 600);  // 100 halves per rank
  auto in = Inputs(s);
  std::vector<uint8_t> out;
  for (int r = 0; r < 3; ++r) out.insert(out.end(), in[r].begin(), in[r].end());
  CHECK(CountWrong(s, 1, out.data()) == 0);
  std::vector<uint8_t> swapped;
  for (int r : {1, 0, 2}) swapped.insert(swapped.end(), in[r].begin(), in[r].end());
  CHECK(CountWrong(s, 1, swapped.data()) > 0);
}

TEST_CASE("broadcast is rank 0's input") {
  BenchPatternSpec s = Spec(kBroadcast, kBfloat16, kSum, 2, 512);
  auto in = Inputs(s);
  CHECK(CountWrong(s, 1, in[0].data()) == 0);
  CHECK(CountWrong(s, 1, in[1].data()) > 0);
}

TEST_CASE("alltoall: block s of rank r's result is block r of rank s's input") {
  BenchPatternSpec s = Spec(kAlltoall, kInt8, kSum, 4, 400);  // 100 per peer
  auto in = Inputs(s);
  const size_t block = s.layout.count;
  for (int r = 0; r < 4; ++r) {
    std::vector<uint8_t> out;
    for (int from = 0; from < 4; ++from) {
      out.insert(out.end(), in[from].begin() + r * block, in[from].begin() + (r + 1) * block);
    }
    CHECK(CountWrong(s, r, out.data()) == 0);
    CHECK(CountWrong(s, (r + 1) % 4, out.data()) > 0);
  }
}

}  // namespace
}  // namespace ard::ctl
