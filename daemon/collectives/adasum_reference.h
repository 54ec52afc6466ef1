// Test-only plain reference of Adasum (adasum.h), written from the formula and independent of
// the daemon's code: everything in double, sums accumulated one element after another, the tree
// built level by level exactly as its description reads. Results agree with the daemon's within
// rounding, not bit for bit (the daemon sums in 4 lanes and rounds to the tensor's type at each
// pair). Slow and obvious on purpose. Pure functions.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "proto/local_wire.h"
#include "daemon/collectives/reduce_reference.h"

namespace ard::collectives::reference {

// Float16/32/64 bytes as doubles (exact: each of those values is a double).
inline std::vector<double> FloatsAsDoubles(wire::DataType dtype,
                                           const std::vector<uint8_t>& bytes) {
  const size_t elem = wire::DataTypeSize(static_cast<uint32_t>(dtype));
  std::vector<double> out(bytes.size() / elem);
  for (size_t i = 0; i < out.size(); ++i) {
    if (dtype == wire::DataType::kFloat16) {
      uint16_t h;
      std::memcpy(&h, &bytes[i * 2], 2);
      out[i] = HalfToFloat(h);
    } else if (dtype == wire::DataType::kFloat32) {
      float f;
      std::memcpy(&f, &bytes[i * 4], 4);
      out[i] = f;
    } else {
      std::memcpy(&out[i], &bytes[i * 8], 8);
    }
  }
  return out;
}

// (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b; a coefficient of a vector whose squared
// norm is below sqrt(DBL_MIN) (a zero vector) is 1.
inline std::vector<double> AdasumPair(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double tiny = std::sqrt(DBL_MIN);
  const double ca = aa < tiny ? 1.0 : 1.0 - dot / (2 * aa);
  const double cb = bb < tiny ? 1.0 : 1.0 - dot / (2 * bb);
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// Pairs (0,1), (2,3), ... of one level; an odd last vector moves up unchanged; until one is left.
inline std::vector<double> AdasumTree(std::vector<std::vector<double>> level) {
  while (level.size() > 1) {
    std::vector<std::vector<double>> next;
    for (size_t i = 0; i + 1 < level.size(); i += 2) {
      next.push_back(AdasumPair(level[i], level[i + 1]));
    }
    if (level.size() % 2 == 1) next.push_back(level.back());
    level = std::move(next);
  }
  return level.empty() ? std::vector<double>() : level[0];
}

}  // namespace ard::collectives::reference
