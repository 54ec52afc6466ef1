// Throughput of the TCP data plane's host allreduce (AllreduceInPlace, float32 Sum) over
// loopback, n hosts simulated as threads of this process (each with its own DataListener and
// TcpMesh, as separate daemons would have). Prints nccl-tests-style rows: size per host, time per
// allreduce (median of rounds), algbw = size / time, busbw = algbw * 2(n-1)/n. No assertions.
//   bazel run //daemon/dataplane/tcp:mesh_bench -- [--hosts=2,4] [--sizes=4,1048576,...]
//       [--socket_buffer=BYTES (0 = kernel auto-tuning)] [--chunk=BYTES] [--seconds=S]
//       [--mode=allreduce|ring] [--busy_poll_us=US] [--variants=plain,checksum,tls]
// --variants runs each size once per variant in the same run, interleaved (so the machine's load
// hits them alike): "checksum" is the daemon's plaintext data plane (authenticated, XXH3 checksum
// per transfer; the default), "plain" the same without the checksum, "tls" the daemon with
// --data_plane_tls (TLS 1.3, certificates made with the openssl command: test_pki.h).
// --mode=ring is the baseline of MEASUREMENTS.md's "raw TCP ring": every host sends `size` bytes
// to the next host while receiving as much from the previous one (TcpMesh::Exchange, no
// reduction); its busbw column is then the per-link rate, size / time.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "daemon/common/logging.h"
#include "daemon/dataplane/tcp/host_collectives.h"
#include "daemon/dataplane/tcp/mesh_fixture.h"
#include "daemon/dataplane/tcp/test_pki.h"

namespace ard::dataplane::tcp {
namespace {

struct BenchOptions {
  std::vector<int> hosts = {2, 4};
  std::vector<size_t> sizes = {4, 1 << 20, 16 << 20, 256 << 20};
  int socket_buffer = kDefaultSocketBufferBytes;
  AlgorithmOptions collective;
  double seconds = 2.0;  // per row, roughly
  bool ring = false;
  absl::Duration busy_poll;
  std::vector<std::string> variants = {"checksum"};
};

template <typename T>
std::vector<T> ParseList(const std::string& text) {
  std::vector<T> out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(part, &v)) {
      std::fprintf(stderr, "bad number '%s'\n", std::string(part).c_str());
      std::exit(2);
    }
    out.push_back(static_cast<T>(v));
  }
  return out;
}

BenchOptions Parse(int argc, char** argv) {
  BenchOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    const std::string key = arg.substr(0, eq),
                      value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    if (key == "--hosts")
      o.hosts = ParseList<int>(value);
    else if (key == "--sizes")
      o.sizes = ParseList<size_t>(value);
    else if (key == "--socket_buffer")
      o.socket_buffer = ParseList<int>(value).at(0);
    else if (key == "--chunk")
      o.collective.chunk_bytes = ParseList<size_t>(value).at(0);
    else if (key == "--algorithm") {
      auto algorithm = ParseAllreduceAlgorithm(value);
      if (!algorithm.ok()) {
        std::fprintf(stderr, "--algorithm: %s\n",
                     std::string(algorithm.status().message()).c_str());
        std::exit(2);
      }
      o.collective.allreduce = *algorithm;
    } else if (key == "--ring_threshold")
      o.collective.ring_threshold_bytes = ParseList<size_t>(value).at(0);
    else if (key == "--busy_poll_us")
      o.busy_poll = absl::Microseconds(std::atoi(value.c_str()));
    else if (key == "--seconds")
      o.seconds = std::atof(value.c_str());
    else if (key == "--variants")
      o.variants = absl::StrSplit(value, ',');
    else if (key == "--mode" && (value == "ring" || value == "allreduce"))
      o.ring = value == "ring";
    else {
      std::fprintf(stderr, "unknown flag %s\n", arg.c_str());
      std::exit(2);
    }
  }
  return o;
}

// Runs `iterations` allreduces on every host; returns the seconds host 0 took per allreduce.
double TimeRound(std::vector<std::unique_ptr<TcpMesh>>& meshes,
                 std::vector<std::vector<float>>& bufs, int iterations, const BenchOptions& o) {
  const int n = static_cast<int>(meshes.size());
  double seconds = 0;
  auto statuses = RunOnHosts(n, [&](int h) -> absl::Status {
    std::vector<float> ring_in(o.ring ? bufs[h].size() : 0);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) {
      const size_t bytes = bufs[h].size() * 4;
      absl::Status s = o.ring ? meshes[h]->Exchange((h + 1) % n, bufs[h].data(), bytes,
                                                    (h + n - 1) % n, ring_in.data(), bytes)
                              : AllreduceInPlace(*meshes[h], bufs[h].data(), bufs[h].size(),
                                                 wire::DataType::kFloat32, wire::ReduceOp::kSum);
      if (!s.ok()) return s;
    }
    if (h == 0) {
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : statuses) {
    if (!s.ok()) {
      std::fprintf(stderr, "allreduce failed: %s\n", s.ToString().c_str());
      std::exit(1);
    }
  }
  return seconds / iterations;
}

// One variant's hosts and meshes (see --variants).
struct Variant {
  std::string name;
  std::unique_ptr<LocalHosts> hosts;
  std::vector<std::unique_ptr<TcpMesh>> meshes;
};

Variant Connect(int n, const std::string& name, const BenchOptions& o) {
  DataListenerOptions listener_options;
  listener_options.socket_buffer_bytes = o.socket_buffer;
  listener_options.algorithms = o.collective;
  TcpMeshOptions mesh_options;
  mesh_options.socket_buffer_bytes = o.socket_buffer;
  mesh_options.busy_poll = o.busy_poll;
  if (name == "plain") {
    mesh_options.checksum = false;
  } else if (name == "tls") {
    absl::StatusOr<std::shared_ptr<DataTlsContext>> tls = TestTlsContext("good");
    if (!tls.ok()) {
      std::fprintf(stderr, "tls: %s\n", tls.status().ToString().c_str());
      std::exit(1);
    }
    listener_options.tls = *tls;
  } else if (name != "checksum") {
    std::fprintf(stderr, "unknown variant %s (plain, checksum, tls)\n", name.c_str());
    std::exit(2);
  }
  Variant v{name, std::make_unique<LocalHosts>(n, listener_options), {}};
  auto meshes = v.hosts->ConnectAll(1, mesh_options);
  if (!v.hosts->start_status().ok() || !meshes.ok()) {
    std::fprintf(stderr, "setup failed: %s\n", meshes.status().ToString().c_str());
    std::exit(1);
  }
  v.meshes = std::move(*meshes);
  return v;
}

void BenchHosts(int n, const BenchOptions& o) {
  std::vector<Variant> variants;
  for (const std::string& name : o.variants) variants.push_back(Connect(n, name, o));
  for (size_t bytes : o.sizes) {
    for (Variant& v : variants) {
      std::vector<std::vector<float>> bufs(n, std::vector<float>(bytes / 4, 1.0f));
      double per_op = TimeRound(v.meshes, bufs, 1, o);  // warm-up, sizes the rounds
      const int iterations = std::max(1, static_cast<int>(o.seconds / 5 / per_op));
      std::vector<double> rounds;
      for (int r = 0; r < 5; ++r) rounds.push_back(TimeRound(v.meshes, bufs, iterations, o));
      std::sort(rounds.begin(), rounds.end());
      per_op = rounds[2];
      const double algbw = bytes / per_op / 1e9;
      const double busbw = o.ring ? algbw : algbw * 2 * (n - 1) / n;
      std::printf("%5d %12zu %12.1f %10.3f %10.3f  %s\n", n, bytes, per_op * 1e6, algbw, busbw,
                  v.name.c_str());
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace ard::dataplane::tcp

int main(int argc, char** argv) {
  using namespace ard::dataplane::tcp;
  ard::SetLogLevel(spdlog::level::warn);
  const BenchOptions o = Parse(argc, argv);
  std::printf(
      "# %s, hosts as threads over loopback TCP; socket_buffer=%d chunk=%zu algorithm=%s\n"
      "# hosts        bytes    time(us) algbw(GB/s) busbw(GB/s)  variant\n",
      o.ring ? "raw ring exchange (busbw = per link)" : "float32 Sum allreduce", o.socket_buffer,
      o.collective.chunk_bytes, AllreduceAlgorithmName(o.collective.allreduce).c_str());
  for (int n : o.hosts) BenchHosts(n, o);
  return 0;
}
