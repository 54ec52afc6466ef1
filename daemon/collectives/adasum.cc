#include "daemon/collectives/adasum.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "daemon/collectives/half_float.h"
#include "daemon/common/status_macros.h"

namespace ard::collectives {
namespace {

// float16 is stored as its bits (uint16_t); no integer type reaches these templates.
using Fp16 = uint16_t;

template <typename T>
double ToDouble(T v) {
  if constexpr (std::is_same_v<T, Fp16>) {
    return HalfToFloat(v);
  } else {
    return v;
  }
}

template <typename T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, Fp16>) {
    return std::isnan(v) ? Fp16{0x7e00} : FloatToHalf(static_cast<float>(v));
  } else {
    return std::isnan(v) ? std::numeric_limits<T>::quiet_NaN() : static_cast<T>(v);
  }
}

struct Dots {
  double ab = 0, aa = 0, bb = 0;
};

// The dot product and squared norms in the fixed order of adasum.h (4 interleaved lanes).
template <typename T>
Dots DotsOf(const T* a, const T* b, size_t n) {
  double ab[4] = {0, 0, 0, 0}, aa[4] = {0, 0, 0, 0}, bb[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) {
      const double x = ToDouble(a[i + k]), y = ToDouble(b[i + k]);
      ab[k] += x * y;
      aa[k] += x * x;
      bb[k] += y * y;
    }
  }
  for (int k = 0; i + k < n; ++k) {
    const double x = ToDouble(a[i + k]), y = ToDouble(b[i + k]);
    ab[k] += x * y;
    aa[k] += x * x;
    bb[k] += y * y;
  }
  Dots d;
  d.ab = (ab[0] + ab[1]) + (ab[2] + ab[3]);
  d.aa = (aa[0] + aa[1]) + (aa[2] + aa[3]);
  d.bb = (bb[0] + bb[1]) + (bb[2] + bb[3]);
  return d;
}

// 1 - dot / (2 |v|^2), or 1 for a (near) zero vector; Horovod's threshold.
double Coefficient(double dot, double normsq) {
  static const double kTiny = std::sqrt(DBL_MIN);
  return normsq >= kTiny ? 1.0 - 0.5 * (dot / normsq) : 1.0;
}

template <typename T>
void Pair(const void* a_bytes, const void* b_bytes, void* dst_bytes, size_t n) {
  const T* a = static_cast<const T*>(a_bytes);
  const T* b = static_cast<const T*>(b_bytes);
  T* dst = static_cast<T*>(dst_bytes);
  const Dots d = DotsOf(a, b, n);
  const double ca = Coefficient(d.ab, d.aa);
  const double cb = Coefficient(d.ab, d.bb);
  for (size_t i = 0; i < n; ++i) dst[i] = FromDouble<T>(ca * ToDouble(a[i]) + cb * ToDouble(b[i]));
}

// Per-thread buffers of the tree: one per depth for right subtrees, and zeros for null leaves.
struct TreeScratch {
  std::vector<std::vector<uint8_t>> right;
  std::vector<uint8_t> zeros;
};

// Writes the tree over leaves[lo, hi) (hi > lo) into dst; right subtrees at `depth` use
// scratch.right[depth].
void Tree(const std::vector<const void*>& leaves, size_t lo, size_t hi, size_t count,
          wire::DataType dtype, void* dst, size_t depth, TreeScratch& scratch) {
  const size_t bytes = count * wire::DataTypeSize(static_cast<uint32_t>(dtype));
  if (hi - lo == 1) {
    if (bytes > 0) memcpy(dst, leaves[lo], bytes);
    return;
  }
  size_t p = 1;
  while (2 * p < hi - lo) p *= 2;
  const size_t mid = lo + p;
  const void* left = leaves[lo];
  if (mid - lo > 1) {
    Tree(leaves, lo, mid, count, dtype, dst, depth + 1, scratch);
    left = dst;
  }
  const void* right = leaves[mid];
  if (hi - mid > 1) {
    std::vector<uint8_t>& buf = scratch.right[depth];
    buf.resize(bytes);
    Tree(leaves, mid, hi, count, dtype, buf.data(), depth + 1, scratch);
    right = buf.data();
  }
  AdasumPair(left, right, dst, count, dtype);
}

}  // namespace

bool AdasumSupported(wire::DataType dtype) {
  return dtype == wire::DataType::kFloat16 || dtype == wire::DataType::kFloat32 ||
         dtype == wire::DataType::kFloat64;
}

void AdasumPair(const void* a, const void* b, void* dst, size_t count, wire::DataType dtype) {
  switch (dtype) {
    case wire::DataType::kFloat16:
      return Pair<Fp16>(a, b, dst, count);
    case wire::DataType::kFloat32:
      return Pair<float>(a, b, dst, count);
    case wire::DataType::kFloat64:
      return Pair<double>(a, b, dst, count);
    default:
      ARD_CHECK(false && "AdasumPair: unsupported dtype");
  }
}

void AdasumTree(const std::vector<const void*>& leaves, size_t count, wire::DataType dtype,
                void* dst) {
  ARD_CHECK(AdasumSupported(dtype));
  const size_t bytes = count * wire::DataTypeSize(static_cast<uint32_t>(dtype));
  if (bytes == 0) return;
  thread_local TreeScratch scratch;
  std::vector<const void*> present = leaves;
  for (const void*& leaf : present) {
    if (leaf != nullptr) continue;
    if (scratch.zeros.size() != bytes) scratch.zeros.assign(bytes, 0);
    leaf = scratch.zeros.data();
  }
  if (present.empty()) {
    memset(dst, 0, bytes);
    return;
  }
  // Depth is at most log2(leaves) + 1 < 64: size the buffers' list once, before any is used.
  if (scratch.right.size() < 64) scratch.right.resize(64);
  Tree(present, 0, present.size(), count, dtype, dst, 0, scratch);
}

}  // namespace ard::collectives
