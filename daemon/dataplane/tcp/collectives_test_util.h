// Test helper for the host collectives' tests: random inputs (with float values whose sum shows
// the order of reduction in its bits) and sequential references of each algorithm's documented
// reduction order (host_collectives.h "Determinism"). Test-only, any thread.
#pragma once

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "catch2/catch.hpp"
#include "daemon/collectives/half_float.h"
#include "daemon/collectives/reduce_kernels.h"
#include "daemon/dataplane/tcp/algorithms.h"
#include "daemon/dataplane/tcp/mesh_fixture.h"

namespace ard::dataplane::tcp::testing {

using Bytes = std::vector<uint8_t>;
using Meshes = std::vector<std::unique_ptr<TcpMesh>>;

inline size_t SizeOf(wire::DataType dtype) {
  return wire::DataTypeSize(static_cast<uint32_t>(dtype));
}

inline Meshes ConnectOrDie(LocalHosts& hosts, uint64_t job_id) {
  REQUIRE(hosts.start_status().ok());
  absl::StatusOr<Meshes> meshes = hosts.ConnectAll(job_id);
  INFO(meshes.status().ToString());
  REQUIRE(meshes.ok());
  return std::move(*meshes);
}

inline bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

// Values of very different magnitudes (so that the order of a float sum shows in the bits),
// with signed zeros (Min/Max keep the dst operand between -0 and +0) and a few infinities/NaNs.
inline float RandomFloat(std::mt19937_64& rng, int max_exponent) {
  const uint64_t r = rng();
  switch (r % 97) {
    case 0:
      return 0.0f;
    case 1:
      return -0.0f;
    case 2:
      return (r & 256) ? INFINITY : -INFINITY;
    case 3:
      return NAN;
  }
  const float unit = static_cast<float>((r >> 11) % 2000001) / 1e6f - 1.0f;
  return std::ldexp(unit, static_cast<int>((r >> 40) % (2 * max_exponent + 1)) - max_exponent);
}

// `integral`: small integers (exact in float16/float32 sums of a few hosts, whatever the order).
inline Bytes RandomInput(wire::DataType dtype, size_t count, uint64_t seed, bool integral = false) {
  std::mt19937_64 rng(seed);
  Bytes out(count * SizeOf(dtype));
  for (size_t i = 0; i < count; ++i) {
    const float value =
        integral ? static_cast<float>(static_cast<int>(rng() % 21) - 10) : RandomFloat(rng, 20);
    if (dtype == wire::DataType::kFloat32) {
      std::memcpy(out.data() + 4 * i, &value, 4);
    } else if (dtype == wire::DataType::kFloat16) {
      const uint16_t v = collectives::FloatToHalf(integral ? value : RandomFloat(rng, 6));
      std::memcpy(out.data() + 2 * i, &v, 2);
    } else {  // integers: random bits (wrapping sums and products are exact in any order)
      const uint64_t v = rng();
      std::memcpy(out.data() + SizeOf(dtype) * i, &v, SizeOf(dtype));
    }
  }
  return out;
}

inline std::vector<Bytes> Inputs(int n, wire::DataType dtype, size_t count, uint64_t salt,
                                 bool integral = false) {
  std::vector<Bytes> inputs;
  for (int h = 0; h < n; ++h) inputs.push_back(RandomInput(dtype, count, salt * 131 + h, integral));
  return inputs;
}

// ((x0 op x1) op x2) ... in host order.
inline Bytes HostOrderReduction(const std::vector<Bytes>& inputs, size_t count,
                                wire::DataType dtype, wire::ReduceOp op) {
  Bytes acc = inputs[0];
  for (size_t h = 1; h < inputs.size(); ++h) {
    collectives::ReduceInto(acc.data(), inputs[h].data(), count, dtype, op);
  }
  return acc;
}

// Recursive doubling's order: leaves x_i op x_(i+p) (i < n - p), then R(lower half) op R(upper).
inline Bytes RecursiveDoublingReference(const std::vector<Bytes>& inputs, size_t count,
                                        wire::DataType dtype, wire::ReduceOp op) {
  const int n = static_cast<int>(inputs.size()), p = PowerOfTwoFloor(n);
  std::vector<Bytes> level(inputs.begin(), inputs.begin() + p);
  for (int i = 0; i + p < n; ++i) {
    collectives::ReduceInto(level[i].data(), inputs[i + p].data(), count, dtype, op);
  }
  while (level.size() > 1) {
    std::vector<Bytes> next;
    for (size_t i = 0; i < level.size(); i += 2) {
      collectives::ReduceInto(level[i].data(), level[i + 1].data(), count, dtype, op);
      next.push_back(std::move(level[i]));
    }
    level = std::move(next);
  }
  return level[0];
}

// The ring's order for element blocks of `counts` (host order): block b accumulates
// x_b op (x_(b-1) op (... op x_(b+1))). Returns the whole buffer with every block reduced.
inline Bytes RingReference(const std::vector<Bytes>& inputs, const std::vector<size_t>& counts,
                           wire::DataType dtype, wire::ReduceOp op) {
  const int n = static_cast<int>(inputs.size());
  const size_t esize = SizeOf(dtype);
  Bytes out = inputs[0];
  size_t offset = 0;
  for (int b = 0; b < n; ++b) {
    const size_t at = offset * esize, bytes = counts[b] * esize;
    Bytes acc(inputs[(b + 1) % n].begin() + at, inputs[(b + 1) % n].begin() + at + bytes);
    for (int k = 2; k <= n; ++k) {
      Bytes mine(inputs[(b + k) % n].begin() + at, inputs[(b + k) % n].begin() + at + bytes);
      collectives::ReduceInto(mine.data(), acc.data(), counts[b], dtype, op);
      acc = std::move(mine);
    }
    if (bytes > 0) std::memcpy(out.data() + at, acc.data(), bytes);
    offset += counts[b];
  }
  return out;
}

// The element blocks the ring allreduce uses: count / n each, the first count % n one more.
inline std::vector<size_t> EvenCounts(size_t count, int n) {
  std::vector<size_t> counts;
  for (int h = 0; h < n; ++h) counts.push_back(count / n + (static_cast<size_t>(h) < count % n));
  return counts;
}

inline Bytes AllreduceReference(AllreduceAlgorithm algorithm, const std::vector<Bytes>& inputs,
                                size_t count, wire::DataType dtype, wire::ReduceOp op) {
  if (inputs.size() == 1) return inputs[0];
  if (algorithm == AllreduceAlgorithm::kRing) {
    return RingReference(inputs, EvenCounts(count, static_cast<int>(inputs.size())), dtype, op);
  }
  return RecursiveDoublingReference(inputs, count, dtype, op);
}

}  // namespace ard::dataplane::tcp::testing
