// Throughput of the reduction kernels against memcpy of the same bytes on this machine.
// Prints GB/s = (bytes of one buffer) / second, best of several timed rounds; a reduction reads
// two buffers and writes one (in place, or to a third with ReduceOutOfPlace: "c=a+b"), memcpy
// reads one and writes one. No assertions: numbers only.
//   bazel run //daemon/collectives:reduce_bench
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <random>
#include <tuple>
#include <vector>

#include "daemon/collectives/reduce_kernels.h"

namespace ard::collectives {
namespace {

// A 64-byte-aligned buffer (as shared-memory tensor slots are).
struct AlignedBuffer {
  explicit AlignedBuffer(size_t bytes)
      : data(static_cast<uint8_t*>(std::aligned_alloc(64, bytes))) {
    std::memset(data, 0, bytes);  // fault the pages in before timing
  }
  ~AlignedBuffer() { std::free(data); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* data;
};

// Best GB/s over rounds of at least ~50 ms each.
double BestGbps(size_t bytes, const std::function<void()>& body) {
  using Clock = std::chrono::steady_clock;
  body();  // warm-up
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    int iterations = 0;
    const auto start = Clock::now();
    double seconds = 0;
    do {
      body();
      ++iterations;
      seconds = std::chrono::duration<double>(Clock::now() - start).count();
    } while (seconds < 0.05);
    best = std::max(best, static_cast<double>(bytes) * iterations / seconds / 1e9);
  }
  return best;
}

void Run() {
  const bool avx2 = KernelIsaSupported(KernelIsa::kAvx2);
  std::printf("GB/s (bytes of one buffer per second); best ISA here: %s\n",
              avx2 ? "avx2+f16c" : "portable");
  std::printf("%8s %8s %9s %9s %9s %9s %9s %9s %9s\n", "size", "memcpy", "f32 sum", "f32 sum",
              "f16 sum", "f16 sum", "bf16 sum", "bf16 sum", "f32 sum");
  std::printf("%8s %8s %9s %9s %9s %9s %9s %9s %9s\n", "", "", "portable", "avx2", "portable",
              "avx2", "portable", "avx2", "c=a+b");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> small(-1e-3f, 1e-3f);
  for (size_t mib : {1, 16, 128}) {
    const size_t bytes = mib << 20;
    AlignedBuffer dst(bytes), src(bytes), copy(bytes);
    // Ordinary values of each type (random bit patterns would be NaN, huge or subnormal).
    std::vector<float> f32(bytes / 4);
    std::vector<uint16_t> f16(bytes / 2), bf16(bytes / 2);
    for (float& x : f32) x = small(rng);
    for (size_t i = 0; i < f16.size(); ++i) {
      f16[i] = FloatToHalf(small(rng));
      bf16[i] = FloatToBfloat16(small(rng));
    }
    auto gbps = [&](wire::DataType dtype, const void* values, size_t elem, KernelIsa isa) {
      if (isa == KernelIsa::kAvx2 && !avx2) return 0.0;
      std::memcpy(src.data, values, bytes);
      std::memset(dst.data, 0, bytes);
      return BestGbps(bytes, [&] {
        ReduceInto(dst.data, src.data, bytes / elem, dtype, wire::ReduceOp::kSum, isa);
      });
    };
    const double memcpy_gbps = BestGbps(bytes, [&] { std::memcpy(copy.data, src.data, bytes); });
    std::printf("%5zuMiB %8.2f", mib, memcpy_gbps);
    for (auto [dtype, values, elem] :
         {std::tuple{wire::DataType::kFloat32, static_cast<const void*>(f32.data()), 4},
          std::tuple{wire::DataType::kFloat16, static_cast<const void*>(f16.data()), 2},
          std::tuple{wire::DataType::kBfloat16, static_cast<const void*>(bf16.data()), 2}}) {
      for (KernelIsa isa : {KernelIsa::kPortable, KernelIsa::kAvx2}) {
        std::printf(" %9.2f", gbps(dtype, values, elem, isa));
      }
    }
    // ReduceOutOfPlace (best ISA): reads two buffers, writes a third.
    std::memcpy(src.data, f32.data(), bytes);
    std::printf(" %9.2f\n", BestGbps(bytes, [&] {
                  ReduceOutOfPlace(copy.data, dst.data, src.data, bytes / 4,
                                   wire::DataType::kFloat32, wire::ReduceOp::kSum);
                }));
  }
}

}  // namespace
}  // namespace ard::collectives

int main() {
  ard::collectives::Run();
  return 0;
}
