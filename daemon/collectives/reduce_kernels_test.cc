#include "daemon/collectives/reduce_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "catch2/catch.hpp"
#include "daemon/collectives/reduce_reference.h"

namespace ard::collectives {
namespace {

using reference::BitCast;
using wire::DataType;
using wire::ReduceOp;

constexpr DataType kSupported[] = {DataType::kUint8,   DataType::kInt8,    DataType::kInt32,
                                   DataType::kInt64,   DataType::kFloat16, DataType::kBfloat16,
                                   DataType::kFloat32, DataType::kFloat64};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProduct};
constexpr size_t kCounts[] = {0, 1, 7, 1023, 4099};

std::vector<KernelIsa> SupportedIsas() {
  std::vector<KernelIsa> isas = {KernelIsa::kPortable};
  if (KernelIsaSupported(KernelIsa::kAvx2)) isas.push_back(KernelIsa::kAvx2);
  return isas;
}

size_t ElementSize(DataType dtype) {
  switch (dtype) {
    case DataType::kUint8:
    case DataType::kInt8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBfloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    default:
      return 8;
  }
}

// Random bytes, except that float32/float64 elements are mostly ordinary numbers (random bit
// patterns are mostly huge or tiny); 1 in 4 stays random bits (NaN payloads, inf, subnormals).
// Integers and 16-bit floats are uniformly random bits: wraparound, NaN, inf, subnormals.
std::vector<uint8_t> RandomElements(DataType dtype, size_t count, std::mt19937_64& rng) {
  const size_t size = ElementSize(dtype);
  std::vector<uint8_t> out(count * size);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-20, 20);
  for (size_t i = 0; i < count; ++i) {
    uint64_t bits = rng();
    const bool ordinary = rng() % 4 != 0;
    if (dtype == DataType::kFloat32 && ordinary) {
      bits = BitCast<uint32_t>(static_cast<float>(std::ldexp(unit(rng), exponent(rng))));
    } else if (dtype == DataType::kFloat64 && ordinary) {
      bits = BitCast<uint64_t>(std::ldexp(unit(rng), exponent(rng)));
    }
    std::memcpy(&out[i * size], &bits, size);  // little-endian: the low bytes
  }
  return out;
}

// A buffer placed `offset_elems` elements past a 64-byte boundary, followed by guard bytes that
// no kernel may touch.
class Placed {
 public:
  static constexpr size_t kGuard = 64;
  Placed(const std::vector<uint8_t>& data, size_t offset_bytes)
      : storage_(data.size() + offset_bytes + 64 + kGuard, 0xa5), size_(data.size()) {
    const uintptr_t raw = reinterpret_cast<uintptr_t>(storage_.data());
    start_ = ((64 - raw % 64) % 64) + offset_bytes;
    std::memcpy(ptr(), data.data(), size_);
  }
  uint8_t* ptr() { return storage_.data() + start_; }
  std::vector<uint8_t> bytes() { return std::vector<uint8_t>(ptr(), ptr() + size_); }
  bool GuardIntact() {
    for (size_t i = 0; i < kGuard; ++i) {
      if (ptr()[size_ + i] != 0xa5) return false;
    }
    return true;
  }

 private:
  std::vector<uint8_t> storage_;
  size_t size_;
  size_t start_ = 0;
};

// Empty if equal, else a description of the first differing element.
std::string FirstMismatch(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                          size_t size) {
  for (size_t i = 0; i < got.size(); i += size) {
    if (std::memcmp(&got[i], &want[i], size) != 0) {
      uint64_t g = 0, w = 0;
      std::memcpy(&g, &got[i], size);
      std::memcpy(&w, &want[i], size);
      std::ostringstream out;
      out << "element " << i / size << ": got 0x" << std::hex << g << " want 0x" << w;
      return out.str();
    }
  }
  return "";
}

// x with every NaN replaced by its type's canonical NaN (what any reduction turns a NaN into).
std::vector<uint8_t> WithCanonicalNaNs(DataType dtype, std::vector<uint8_t> x) {
  const size_t size = ElementSize(dtype);
  for (size_t i = 0; i < x.size(); i += size) {
    uint64_t bits = 0;
    std::memcpy(&bits, &x[i], size);
    switch (dtype) {
      case DataType::kFloat16:
        if ((bits & 0x7fff) > 0x7c00) bits = 0x7e00;
        break;
      case DataType::kBfloat16:
        if ((bits & 0x7fff) > 0x7f80) bits = 0x7fc0;
        break;
      case DataType::kFloat32:
        if ((bits & 0x7fffffff) > 0x7f800000) bits = 0x7fc00000;
        break;
      case DataType::kFloat64:
        if ((bits & 0x7fffffffffffffff) > 0x7ff0000000000000) bits = 0x7ff8000000000000;
        break;
      default:
        break;
    }
    std::memcpy(&x[i], &bits, size);
  }
  return x;
}

TEST_CASE("ReductionSupported: Horovod's allreduce types only") {
  for (DataType dtype : kSupported) CHECK(ReductionSupported(dtype));
  CHECK_FALSE(ReductionSupported(DataType::kBool));
  CHECK_FALSE(ReductionSupported(DataType::kInt16));
  CHECK_FALSE(ReductionSupported(DataType::kUint16));
  CHECK_FALSE(ReductionSupported(static_cast<DataType>(0)));
}

TEST_CASE("ReduceInto matches the reference: every dtype, op, count, alignment, ISA") {
  std::mt19937_64 rng(20240601);
  for (KernelIsa isa : SupportedIsas()) {
    for (DataType dtype : kSupported) {
      const size_t size = ElementSize(dtype);
      for (ReduceOp op : kOps) {
        for (size_t count : kCounts) {
          // Aligned, and dst/src each off a vector boundary by a different number of elements.
          for (auto [dst_off, src_off] : {std::pair<size_t, size_t>{0, 0}, {1, 3}}) {
            const std::vector<uint8_t> a = RandomElements(dtype, count, rng);
            const std::vector<uint8_t> b = RandomElements(dtype, count, rng);
            std::vector<uint8_t> want = a;
            for (size_t i = 0; i < count; ++i) {
              reference::ReduceBytes(dtype, op, &want[i * size], &b[i * size]);
            }
            Placed dst(a, dst_off * size), src(b, src_off * size);
            ReduceInto(dst.ptr(), src.ptr(), count, dtype, op, isa);
            INFO("isa " << int(isa) << " dtype " << int(dtype) << " op " << int(op) << " count "
                        << count << " offsets " << dst_off << "," << src_off);
            CHECK(FirstMismatch(dst.bytes(), want, size) == "");
            CHECK(src.bytes() == b);
            CHECK(dst.GuardIntact());
          }
        }
      }
    }
  }
}

TEST_CASE("ReduceOutOfPlace matches the reference: every dtype, op, count, alignment, ISA") {
  std::mt19937_64 rng(20261125);
  for (KernelIsa isa : SupportedIsas()) {
    for (DataType dtype : kSupported) {
      const size_t size = ElementSize(dtype);
      for (ReduceOp op : kOps) {
        for (size_t count : kCounts) {
          for (auto [dst_off, a_off, b_off] :
               {std::tuple<size_t, size_t, size_t>{0, 0, 0}, {2, 1, 3}}) {
            const std::vector<uint8_t> a = RandomElements(dtype, count, rng);
            const std::vector<uint8_t> b = RandomElements(dtype, count, rng);
            std::vector<uint8_t> want = a;
            for (size_t i = 0; i < count; ++i) {
              reference::ReduceBytes(dtype, op, &want[i * size], &b[i * size]);
            }
            // dst starts as garbage that must not leak into the result.
            Placed dst(RandomElements(dtype, count, rng), dst_off * size);
            Placed pa(a, a_off * size), pb(b, b_off * size);
            ReduceOutOfPlace(dst.ptr(), pa.ptr(), pb.ptr(), count, dtype, op, isa);
            INFO("isa " << int(isa) << " dtype " << int(dtype) << " op " << int(op) << " count "
                        << count << " offsets " << dst_off << "," << a_off << "," << b_off);
            CHECK(FirstMismatch(dst.bytes(), want, size) == "");
            CHECK(pa.bytes() == a);
            CHECK(pb.bytes() == b);
            CHECK(dst.GuardIntact());
            // dst == a is the in-place form.
            ReduceOutOfPlace(pa.ptr(), pa.ptr(), pb.ptr(), count, dtype, op, isa);
            CHECK(FirstMismatch(pa.bytes(), want, size) == "");
            CHECK(pa.GuardIntact());
          }
        }
      }
    }
  }
}

TEST_CASE("ReduceOutOfPlace keeps a's zero on Min/Max ties and canonicalizes NaN") {
  const float a[] = {-0.0f, 0.0f, BitCast<float>(0xffc01234u), 1.0f};
  const float b[] = {0.0f, -0.0f, 1.0f, BitCast<float>(0x7f800001u)};
  float min[4], max[4];
  ReduceOutOfPlace(min, a, b, 4, DataType::kFloat32, ReduceOp::kMin);
  ReduceOutOfPlace(max, a, b, 4, DataType::kFloat32, ReduceOp::kMax);
  CHECK(std::signbit(min[0]));
  CHECK_FALSE(std::signbit(max[1]));
  for (int i : {2, 3}) {
    CHECK(BitCast<uint32_t>(min[i]) == 0x7fc00000u);
    CHECK(BitCast<uint32_t>(max[i]) == 0x7fc00000u);
  }
}

TEST_CASE("every ISA gives bit-identical results, NaN payloads included") {
  std::mt19937_64 rng(7);
  const std::vector<KernelIsa> isas = SupportedIsas();
  for (DataType dtype : kSupported) {
    for (ReduceOp op : kOps) {
      const std::vector<uint8_t> a = RandomElements(dtype, 70001, rng);
      const std::vector<uint8_t> b = RandomElements(dtype, 70001, rng);
      std::vector<uint8_t> first;
      for (KernelIsa isa : isas) {
        std::vector<uint8_t> d = a;
        ReduceInto(d.data(), b.data(), 70001, dtype, op, isa);
        Scale(d.data(), 70001, dtype, 0.37, isa);
        if (first.empty()) first = d;
        INFO("isa " << int(isa) << " dtype " << int(dtype) << " op " << int(op));
        CHECK(FirstMismatch(d, first, ElementSize(dtype)) == "");
      }
    }
  }
}

TEST_CASE("integer Sum and Product wrap like two's complement") {
  int8_t a8[] = {127, -128, 100, -1};
  const int8_t b8[] = {1, -1, 100, -1};
  ReduceInto(a8, b8, 4, DataType::kInt8, ReduceOp::kSum);
  CHECK(a8[0] == -128);
  CHECK(a8[1] == 127);
  CHECK(a8[2] == -56);
  CHECK(a8[3] == -2);
  uint8_t u8[] = {255, 16};
  const uint8_t v8[] = {1, 16};
  ReduceInto(u8, v8, 2, DataType::kUint8, ReduceOp::kProduct);
  CHECK(u8[0] == 255);
  CHECK(u8[1] == 0);
  int32_t a32[] = {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  const int32_t b32[] = {1, -1};
  ReduceInto(a32, b32, 2, DataType::kInt32, ReduceOp::kSum);
  CHECK(a32[0] == std::numeric_limits<int32_t>::min());
  CHECK(a32[1] == std::numeric_limits<int32_t>::max());
  int64_t a64[] = {std::numeric_limits<int64_t>::max(), int64_t{1} << 62};
  const int64_t b64[] = {2, 4};
  ReduceInto(a64, b64, 2, DataType::kInt64, ReduceOp::kProduct);
  CHECK(a64[0] == -2);
  CHECK(a64[1] == 0);
}

TEST_CASE("float NaN and infinity: Min/Max propagate NaN, every NaN is canonical") {
  const float nan_payload = BitCast<float>(0xffc01234u);
  const float inf = INFINITY;
  float d[] = {nan_payload, 1.0f, inf, -inf, inf, -0.0f, 0.0f};
  const float s[] = {1.0f, nan_payload, nan_payload, 5.0f, -inf, 0.0f, -0.0f};
  float min[7], max[7], sum[7];
  std::memcpy(min, d, sizeof d);
  std::memcpy(max, d, sizeof d);
  std::memcpy(sum, d, sizeof d);
  ReduceInto(min, s, 7, DataType::kFloat32, ReduceOp::kMin);
  ReduceInto(max, s, 7, DataType::kFloat32, ReduceOp::kMax);
  ReduceInto(sum, s, 7, DataType::kFloat32, ReduceOp::kSum);
  for (int i : {0, 1, 2}) {
    CHECK(BitCast<uint32_t>(min[i]) == 0x7fc00000u);
    CHECK(BitCast<uint32_t>(max[i]) == 0x7fc00000u);
    CHECK(BitCast<uint32_t>(sum[i]) == 0x7fc00000u);
  }
  CHECK(min[3] == -inf);
  CHECK(max[3] == 5.0f);
  CHECK(sum[3] == -inf);
  CHECK(BitCast<uint32_t>(sum[4]) == 0x7fc00000u);  // inf + -inf (x86 would give 0xffc00000)
  CHECK(std::signbit(min[5]));                      // -0 vs +0: dst's zero is kept
  CHECK_FALSE(std::signbit(max[6]));

  uint16_t h[] = {0x7c01, 0x3c00, 0x7c00, 0xfc00};
  const uint16_t hs[] = {0x3c00, 0xfe00, 0xfc00, 0x7c00};
  ReduceInto(h, hs, 4, DataType::kFloat16, ReduceOp::kMax);
  CHECK(h[0] == 0x7e00);
  CHECK(h[1] == 0x7e00);
  CHECK(h[2] == 0x7c00);
  CHECK(h[3] == 0x7c00);
  double dd[] = {INFINITY};
  const double ds[] = {-INFINITY};
  ReduceInto(dd, ds, 1, DataType::kFloat64, ReduceOp::kSum);
  CHECK(BitCast<uint64_t>(dd[0]) == 0x7ff8000000000000u);
}

TEST_CASE("float16 and bfloat16 sums round to nearest even at every step") {
  // float16: 1 + 2^-11 is a tie (to 1.0); (1 + 2^-10) + 2^-11 ties up to 1 + 2^-9.
  uint16_t h[] = {0x3c00, 0x3c01, 0x0001, 0x03ff, 0x7bff};
  const uint16_t hs[] = {0x1000, 0x1000, 0x0001, 0x0001, 0x5000};
  ReduceInto(h, hs, 5, DataType::kFloat16, ReduceOp::kSum);
  CHECK(h[0] == 0x3c00);
  CHECK(h[1] == 0x3c02);
  CHECK(h[2] == 0x0002);  // subnormal + subnormal
  CHECK(h[3] == 0x0400);  // into the normal range
  CHECK(h[4] == 0x7c00);  // 65504 + 32 = 65536: overflow to inf
  // bfloat16: 1 + 2^-8 ties to 1.0; 256 + 1 ties to 256.
  uint16_t b[] = {0x3f80, 0x4380};
  const uint16_t bs[] = {0x3b80, 0x3f80};
  ReduceInto(b, bs, 2, DataType::kBfloat16, ReduceOp::kSum);
  CHECK(b[0] == 0x3f80);
  CHECK(b[1] == 0x4380);
}

TEST_CASE("Scale matches the reference for every dtype and ISA") {
  std::mt19937_64 rng(99);
  for (KernelIsa isa : SupportedIsas()) {
    for (DataType dtype : kSupported) {
      const size_t size = ElementSize(dtype);
      for (double factor : {0.25, 1.0 / 3, -2.5, 1e30, 0.0}) {
        for (size_t count : kCounts) {
          const std::vector<uint8_t> a = RandomElements(dtype, count, rng);
          std::vector<uint8_t> want = a;
          for (size_t i = 0; i < count; ++i) reference::ScaleBytes(dtype, factor, &want[i * size]);
          Placed buf(a, size);
          Scale(buf.ptr(), count, dtype, factor, isa);
          INFO("isa " << int(isa) << " dtype " << int(dtype) << " factor " << factor << " count "
                      << count);
          CHECK(FirstMismatch(buf.bytes(), want, size) == "");
          CHECK(buf.GuardIntact());
        }
      }
    }
  }
}

TEST_CASE("Scale on integers truncates toward zero and saturates") {
  int32_t i32[] = {7, -7, std::numeric_limits<int32_t>::max(), 1};
  Scale(i32, 4, DataType::kInt32, 0.5);
  CHECK(i32[0] == 3);
  CHECK(i32[1] == -3);
  CHECK(i32[2] == 1073741823);
  CHECK(i32[3] == 0);
  int8_t i8[] = {100, -100, 3};
  Scale(i8, 3, DataType::kInt8, 2.0);
  CHECK(i8[0] == 127);
  CHECK(i8[1] == -128);
  CHECK(i8[2] == 6);
  uint8_t u8[] = {200, 10};
  Scale(u8, 2, DataType::kUint8, 2.0);
  CHECK(u8[0] == 255);
  CHECK(u8[1] == 20);
  Scale(u8, 2, DataType::kUint8, -1.0);
  CHECK(u8[0] == 0);
  int64_t i64[] = {int64_t{1} << 62, -(int64_t{1} << 62), 12345};
  Scale(i64, 3, DataType::kInt64, 4.0);
  CHECK(i64[0] == std::numeric_limits<int64_t>::max());
  CHECK(i64[1] == std::numeric_limits<int64_t>::min());
  CHECK(i64[2] == 49380);
  int32_t nan_product[] = {5};
  Scale(nan_product, 1, DataType::kInt32, std::nan(""));
  CHECK(nan_product[0] == 0);
}

TEST_CASE("Scale by exactly 1.0 leaves the buffer untouched") {
  const uint32_t payload = 0xffc01234u;  // a NaN that any arithmetic would canonicalize
  float f[] = {BitCast<float>(payload), 3.0f};
  Scale(f, 2, DataType::kFloat32, 1.0);
  CHECK(BitCast<uint32_t>(f[0]) == payload);
  CHECK(f[1] == 3.0f);
}

TEST_CASE("FillIdentity then ReduceInto(x) gives x, for every dtype and op") {
  std::mt19937_64 rng(3);
  for (KernelIsa isa : SupportedIsas()) {
    for (DataType dtype : kSupported) {
      const size_t size = ElementSize(dtype);
      for (ReduceOp op : kOps) {
        const size_t count = 1031;
        const std::vector<uint8_t> x = RandomElements(dtype, count, rng);
        std::vector<uint8_t> acc(x.size());
        FillIdentity(acc.data(), count, dtype, op);
        ReduceInto(acc.data(), x.data(), count, dtype, op, isa);
        INFO("isa " << int(isa) << " dtype " << int(dtype) << " op " << int(op));
        CHECK(FirstMismatch(acc, WithCanonicalNaNs(dtype, x), size) == "");
      }
    }
  }
  int32_t min_identity = 0;
  FillIdentity(&min_identity, 1, DataType::kInt32, ReduceOp::kMin);
  CHECK(min_identity == std::numeric_limits<int32_t>::max());
  uint16_t half_identities[4];
  FillIdentity(&half_identities[0], 1, DataType::kFloat16, ReduceOp::kSum);
  FillIdentity(&half_identities[1], 1, DataType::kFloat16, ReduceOp::kProduct);
  FillIdentity(&half_identities[2], 1, DataType::kFloat16, ReduceOp::kMin);
  FillIdentity(&half_identities[3], 1, DataType::kBfloat16, ReduceOp::kMax);
  CHECK(half_identities[0] == 0x8000);  // -0
  CHECK(half_identities[1] == 0x3c00);
  CHECK(half_identities[2] == 0x7c00);
  CHECK(half_identities[3] == 0xff80);
}

}  // namespace
}  // namespace ard::collectives
