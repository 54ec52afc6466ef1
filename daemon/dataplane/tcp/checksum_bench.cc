// How fast one core takes the data plane's checksum (stream_checksum.h) next to a plain copy of
// the same bytes, in GB/s: the checksum's cost per byte without sockets, for bench/RESULTS.md's
// "Data-plane security". The data plane sums each chunk while it is in cache: compare with
// --bytes=262144 (in cache) and the default 64 MiB (from memory). No assertions.
//   bazel run -c opt //daemon/dataplane/tcp:checksum_bench -- [--bytes=N] [--rounds=R]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "daemon/dataplane/tcp/stream_checksum.h"

namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = 64 << 20;
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--bytes=", 0) == 0) {
      bytes = std::strtoull(arg.c_str() + 8, nullptr, 10);
    } else if (arg.rfind("--rounds=", 0) == 0) {
      rounds = std::atoi(arg.c_str() + 9);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", arg.c_str());
      return 2;
    }
  }
  std::vector<unsigned char> data(bytes), copy(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(i * 131 + (i >> 12));
  std::printf("# bytes=%zu, one core; GB/s\n# round  checksum    memcpy\n", bytes);
  ard::dataplane::tcp::StreamChecksum sum;
  for (int r = 0; r < rounds; ++r) {
    auto start = std::chrono::steady_clock::now();
    sum.Extend(data.data(), bytes);
    const double sum_s = Seconds(start);
    start = std::chrono::steady_clock::now();
    std::memcpy(copy.data(), data.data(), bytes);
    const double copy_s = Seconds(start);
    std::printf("%7d %9.2f %9.2f\n", r + 1, bytes / sum_s / 1e9, bytes / copy_s / 1e9);
  }
  std::printf("# checksum %016llx, copy[%zu] %u\n", static_cast<unsigned long long>(sum.Value()),
              bytes / 2, copy[bytes / 2]);  // keep both
  return 0;
}
