#include "daemon/collectives/adasum.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "daemon/collectives/adasum_reference.h"
#include "daemon/collectives/reduce_reference.h"

namespace ard::collectives {
namespace {

using wire::DataType;
namespace ref = reference;

size_t Size(DataType d) { return wire::DataTypeSize(static_cast<uint32_t>(d)); }

// Typed bytes of `values` (rounded to the type) and back.
std::vector<uint8_t> Encode(DataType d, const std::vector<double>& values) {
  std::vector<uint8_t> out(values.size() * Size(d));
  for (size_t i = 0; i < values.size(); ++i) {
    if (d == DataType::kFloat16) {
      const uint16_t h = ref::FloatToHalf(static_cast<float>(values[i]));
      memcpy(&out[i * 2], &h, 2);
    } else if (d == DataType::kFloat32) {
      const float f = static_cast<float>(values[i]);
      memcpy(&out[i * 4], &f, 4);
    } else {
      memcpy(&out[i * 8], &values[i], 8);
    }
  }
  return out;
}

// Relative (to the largest magnitude) tolerance of a few roundings per tree level in the type.
double Tolerance(DataType d) {
  return d == DataType::kFloat16 ? 1e-2 : d == DataType::kFloat32 ? 1e-5 : 1e-12;
}

std::string Compare(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  double scale = 1e-30;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  if (got.size() != want.size()) return "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= tol * scale)) {
      return "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + " want " +
             std::to_string(want[i]);
    }
  }
  return "";
}

// Runs AdasumTree on typed copies of `leaves` (null where `zero[i]`) and returns the result.
std::vector<uint8_t> RunTree(DataType d, const std::vector<std::vector<uint8_t>>& leaves,
                             const std::vector<bool>& zero, size_t count) {
  std::vector<const void*> ptrs;
  for (size_t i = 0; i < leaves.size(); ++i) {
    ptrs.push_back(zero[i] ? nullptr : leaves[i].data());
  }
  std::vector<uint8_t> out(count * Size(d), 0xa5);
  AdasumTree(ptrs, count, d, out.data());
  return out;
}

std::vector<double> Pair64(std::vector<double> a, std::vector<double> b) {
  std::vector<double> out(a.size());
  AdasumPair(a.data(), b.data(), out.data(), a.size(), DataType::kFloat64);
  return out;
}

TEST_CASE("a pair: orthogonal vectors add, equal ones average, a zero vector leaves the other") {
  CHECK(Pair64({1, 0}, {0, 1}) == std::vector<double>{1, 1});
  CHECK(Pair64({2, 4}, {2, 4}) == std::vector<double>{2, 4});
  CHECK(Pair64({3, -1}, {-3, 1}) == std::vector<double>{0, 0});  // opposite: coefficients 1.5
  CHECK(Pair64({0, 0}, {5, -7}) == std::vector<double>{5, -7});
  CHECK(Pair64({5, -7}, {0, 0}) == std::vector<double>{5, -7});
  CHECK(Pair64({0, 0}, {0, 0}) == std::vector<double>{0, 0});
  // a = (3, 0), b = (1, 1): a.b = 3, ca = 1 - 3/18 = 5/6, cb = 1 - 3/4 = 1/4.
  const std::vector<double> got = Pair64({3, 0}, {1, 1});
  CHECK(std::fabs(got[0] - (2.5 + 0.25)) < 1e-15);
  CHECK(got[1] == 0.25);
  // Norms below sqrt(DBL_MIN) count as zero (Horovod's threshold): coefficient 1, a plain sum.
  CHECK(Pair64({1e-160, 0}, {1, 1}) == std::vector<double>{1 + 1e-160 - 1e-160 * 0.5, 1});
}

TEST_CASE("the tree matches the plain reference, every dtype, 1 to 17 leaves, any length") {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> value(-4, 4);
  for (DataType d : {DataType::kFloat16, DataType::kFloat32, DataType::kFloat64}) {
    for (size_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 17}) {
      for (size_t count : {1, 3, 4, 7, 64, 1001}) {
        for (bool with_zeros : {false, true}) {
          std::vector<std::vector<uint8_t>> leaves;
          std::vector<std::vector<double>> exact;
          std::vector<bool> zero;
          std::vector<double> shared(count);
          for (double& x : shared) x = value(rng);
          for (size_t i = 0; i < n; ++i) {
            // A shared direction plus noise, like gradients: neither parallel nor orthogonal.
            std::vector<double> v(count);
            for (size_t k = 0; k < count; ++k) v[k] = 0.5 * shared[k] + value(rng);
            leaves.push_back(Encode(d, v));
            zero.push_back(with_zeros && (i % 3 == 1));
            exact.push_back(zero.back() ? std::vector<double>(count, 0.0) : ref::FloatsAsDoubles(d, leaves[i]));
          }
          const std::vector<double> got = ref::FloatsAsDoubles(d, RunTree(d, leaves, zero, count));
          const std::vector<double> want = ref::AdasumTree(exact);
          INFO("dtype " << static_cast<int>(d) << " leaves " << n << " count " << count << " zeros "
                        << with_zeros);
          CHECK(Compare(got, want, Tolerance(d)) == "");
        }
      }
    }
  }
}

TEST_CASE("the tree is the documented order: ((0,1),(2,3)) then the odd one, bit for bit") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> value(-1, 1);
  const size_t count = 37;
  std::vector<std::vector<double>> v(5, std::vector<double>(count));
  for (auto& x : v) {
    for (double& e : x) e = value(rng);
  }
  std::vector<const void*> ptrs;
  for (auto& x : v) ptrs.push_back(x.data());
  std::vector<double> got(count);
  AdasumTree(ptrs, count, DataType::kFloat64, got.data());
  CHECK(got == Pair64(Pair64(Pair64(v[0], v[1]), Pair64(v[2], v[3])), v[4]));
  // Not the other grouping: the order is part of the result.
  CHECK(got != Pair64(v[0], Pair64(v[1], Pair64(v[2], Pair64(v[3], v[4])))));
}

TEST_CASE("zero vectors: null leaves are zeros, an all-zero tree is zero, one leaf is copied") {
  const size_t count = 9;
  std::vector<std::vector<uint8_t>> leaves;
  for (int i = 0; i < 4; ++i) {
    std::vector<double> v(count);
    for (size_t k = 0; k < count; ++k) v[k] = (i + 1) * 0.25 * (k % 5) - 0.5;
    leaves.push_back(Encode(DataType::kFloat32, v));
  }
  std::vector<std::vector<uint8_t>> with_explicit_zero = leaves;
  with_explicit_zero[2].assign(count * 4, 0);
  CHECK(RunTree(DataType::kFloat32, leaves, {false, false, true, false}, count) ==
        RunTree(DataType::kFloat32, with_explicit_zero, {false, false, false, false}, count));
  CHECK(RunTree(DataType::kFloat32, leaves, {true, true, true, true}, count) ==
        std::vector<uint8_t>(count * 4, 0));
  CHECK(RunTree(DataType::kFloat32, {leaves[3]}, {false}, count) == leaves[3]);
  std::vector<uint8_t> out(count * 4, 0xa5);
  AdasumTree({}, count, DataType::kFloat32, out.data());
  CHECK(out == std::vector<uint8_t>(count * 4, 0));
}

TEST_CASE("a pair may write over either input; results repeat bit for bit; NaN is canonical") {
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f}, b = {0.5f, 4.0f, -1.0f, 2.0f, 1.0f};
  std::vector<float> separate(a.size());
  AdasumPair(a.data(), b.data(), separate.data(), a.size(), DataType::kFloat32);
  std::vector<float> again(a.size());
  AdasumPair(a.data(), b.data(), again.data(), a.size(), DataType::kFloat32);
  CHECK(memcmp(separate.data(), again.data(), a.size() * 4) == 0);
  std::vector<float> in_a = a, in_b = b;
  AdasumPair(in_a.data(), b.data(), in_a.data(), a.size(), DataType::kFloat32);
  AdasumPair(a.data(), in_b.data(), in_b.data(), a.size(), DataType::kFloat32);
  CHECK(memcmp(separate.data(), in_a.data(), a.size() * 4) == 0);
  CHECK(memcmp(separate.data(), in_b.data(), a.size() * 4) == 0);

  std::vector<float> nan_a = a;
  nan_a[1] = -std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out(a.size());
  AdasumPair(nan_a.data(), b.data(), out.data(), a.size(), DataType::kFloat32);
  for (float x : out) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    CHECK(bits == 0x7fc00000u);  // the dot product is NaN, so every element is
  }
  const uint16_t half_nan = 0xfe01, half_one = 0x3c00;
  std::vector<uint16_t> ha = {half_nan, half_one}, hb = {half_one, half_one}, hout(2);
  AdasumPair(ha.data(), hb.data(), hout.data(), 2, DataType::kFloat16);
  CHECK(hout == std::vector<uint16_t>{0x7e00, 0x7e00});
}

TEST_CASE("supported dtypes are the three float types") {
  CHECK(AdasumSupported(DataType::kFloat16));
  CHECK(AdasumSupported(DataType::kFloat32));
  CHECK(AdasumSupported(DataType::kFloat64));
  for (DataType d : {DataType::kUint8, DataType::kInt8, DataType::kInt32, DataType::kInt64,
                     DataType::kBfloat16, DataType::kBool, DataType::kUint16, DataType::kInt16}) {
    CHECK_FALSE(AdasumSupported(d));
  }
}

}  // namespace
}  // namespace ard::collectives
