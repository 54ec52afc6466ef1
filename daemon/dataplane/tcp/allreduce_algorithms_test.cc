// The allreduce algorithms x host counts (2, 3, 4, 5, 8) over real loopback sockets, hosts as
// threads: every host's result is bit-identical to the sequential reference of the algorithm's
// documented reduction order, and exact where the order cannot matter.
#include <numeric>
#include <vector>

#include "catch2/catch.hpp"
#include "daemon/dataplane/tcp/collectives_test_util.h"
#include "daemon/dataplane/tcp/host_collectives.h"

namespace ard::dataplane::tcp {
namespace {

using namespace testing;
using wire::DataType;
using wire::ReduceOp;

constexpr int kHostCounts[] = {2, 3, 4, 5, 8};
constexpr AllreduceAlgorithm kAlgorithms[] = {
    AllreduceAlgorithm::kRing, AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kAuto};

// Small ring pieces, so that even small buffers go through the chunked pipeline.
DataListenerOptions SmallChunks() {
  DataListenerOptions options;
  options.algorithms.chunk_bytes = 256;
  options.algorithms.ring_threshold_bytes = 4096;
  return options;
}

// Runs the allreduce on every host; returns each host's buffer.
std::vector<Bytes> RunAllreduce(Meshes& meshes, const std::vector<Bytes>& inputs, size_t count,
                                DataType dtype, ReduceOp op, AllreduceAlgorithm algorithm) {
  std::vector<Bytes> bufs = inputs;
  const int n = static_cast<int>(meshes.size());
  auto statuses = RunOnHosts(n, [&](int h) {
    return AllreduceInPlace(*meshes[h], bufs[h].data(), count, dtype, op, algorithm);
  });
  for (const absl::Status& s : statuses) INFO(s.ToString());
  REQUIRE(AllOk(statuses));
  return bufs;
}

TEST_CASE("Allreduce algorithms match their reference order, bit-identical on every host") {
  const DataType dtypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kInt64};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
  for (int n : kHostCounts) {
    LocalHosts hosts(n, SmallChunks());
    Meshes meshes = ConnectOrDie(hosts, 200 + n);
    uint64_t salt = 0;
    // Fewer elements than hosts, sizes that do not divide by n, several ring pieces per block.
    for (size_t count :
         {size_t{0}, size_t{1}, size_t(n - 1), size_t(n + 1), size_t{1001}, size_t{30011}}) {
      for (DataType dtype : dtypes) {
        for (ReduceOp op : ops) {
          const std::vector<Bytes> inputs = Inputs(n, dtype, count, ++salt);
          for (AllreduceAlgorithm algorithm : kAlgorithms) {
            const AllreduceAlgorithm chosen =
                algorithm == AllreduceAlgorithm::kAuto
                    ? ChooseAllreduce(meshes[0]->algorithms(), n, count, SizeOf(dtype))
                    : algorithm;
            INFO("n=" << n << " count=" << count << " dtype=" << static_cast<int>(dtype)
                      << " op=" << static_cast<int>(op)
                      << " algorithm=" << AllreduceAlgorithmName(algorithm));
            const Bytes expected = AllreduceReference(chosen, inputs, count, dtype, op);
            const std::vector<Bytes> got =
                RunAllreduce(meshes, inputs, count, dtype, op, algorithm);
            for (int h = 0; h < n; ++h) REQUIRE(got[h] == expected);
          }
        }
      }
    }
  }
}

TEST_CASE("Allreduce algorithms give the exact sum where the order cannot matter") {
  for (int n : kHostCounts) {
    LocalHosts hosts(n, SmallChunks());
    Meshes meshes = ConnectOrDie(hosts, 300 + n);
    for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
      const size_t count = 4099;
      const std::vector<Bytes> inputs = Inputs(n, dtype, count, 7 + n, /*integral=*/true);
      const Bytes expected = HostOrderReduction(inputs, count, dtype, ReduceOp::kSum);
      for (AllreduceAlgorithm algorithm : kAlgorithms) {
        INFO("n=" << n << " dtype=" << static_cast<int>(dtype)
                  << " algorithm=" << AllreduceAlgorithmName(algorithm));
        const std::vector<Bytes> got =
            RunAllreduce(meshes, inputs, count, dtype, ReduceOp::kSum, algorithm);
        for (int h = 0; h < n; ++h) REQUIRE(got[h] == expected);
      }
    }
  }
}

TEST_CASE("The reference orders are observable: each differs from a host-order float sum") {
  const size_t count = 1001;
  for (int n : {3, 5, 8}) {
    const std::vector<Bytes> inputs = Inputs(n, DataType::kFloat32, count, 5);
    const Bytes host_order = HostOrderReduction(inputs, count, DataType::kFloat32, ReduceOp::kSum);
    for (AllreduceAlgorithm a :
         {AllreduceAlgorithm::kRing, AllreduceAlgorithm::kRecursiveDoubling}) {
      REQUIRE(AllreduceReference(a, inputs, count, DataType::kFloat32, ReduceOp::kSum) !=
              host_order);
    }
  }
}

TEST_CASE("Ring allreduce of 20 MiB in the default 4 MiB pieces matches its reference") {
  const size_t count = (20u << 20) / 4 + 3;
  for (int n : {2, 3, 5}) {
    INFO("n=" << n);
    LocalHosts hosts(n);
    Meshes meshes = ConnectOrDie(hosts, 400 + n);
    const std::vector<Bytes> inputs = Inputs(n, DataType::kFloat32, count, 77 + n);
    const Bytes expected = AllreduceReference(AllreduceAlgorithm::kRing, inputs, count,
                                              DataType::kFloat32, ReduceOp::kSum);
    const std::vector<Bytes> got = RunAllreduce(meshes, inputs, count, DataType::kFloat32,
                                                ReduceOp::kSum, AllreduceAlgorithm::kAuto);
    for (int h = 0; h < n; ++h) REQUIRE(got[h] == expected);
  }
}

TEST_CASE("Allreduce from a separate input gives the in-place bits and leaves the input as is") {
  for (int n : kHostCounts) {
    LocalHosts hosts(n, SmallChunks());
    Meshes meshes = ConnectOrDie(hosts, 450 + n);
    uint64_t salt = 0;
    for (size_t count : {size_t{0}, size_t{1}, size_t(n + 1), size_t{1001}, size_t{30011}}) {
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
        // Max: the ring's out-of-place kernel keeps the operand order (mine op partial).
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          const std::vector<Bytes> inputs = Inputs(n, dtype, count, 1000 + ++salt);
          for (AllreduceAlgorithm algorithm : kAlgorithms) {
            INFO("n=" << n << " count=" << count << " dtype=" << static_cast<int>(dtype)
                      << " op=" << static_cast<int>(op)
                      << " algorithm=" << AllreduceAlgorithmName(algorithm));
            const std::vector<Bytes> in_place =
                RunAllreduce(meshes, inputs, count, dtype, op, algorithm);
            const std::vector<Bytes> kept = inputs;
            // Outputs start as garbage: no block of the result may come from the old contents.
            std::vector<Bytes> outputs(n, Bytes(count * SizeOf(dtype), 0xA5));
            REQUIRE(AllOk(RunOnHosts(n, [&](int h) {
              return Allreduce(*meshes[h], kept[h].data(), outputs[h].data(), count, dtype, op,
                               algorithm);
            })));
            for (int h = 0; h < n; ++h) {
              REQUIRE(outputs[h] == in_place[h]);
              REQUIRE(kept[h] == inputs[h]);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("Allreduce reduces kAverage like kSum (scaling is the caller's)") {
  LocalHosts hosts(3);
  Meshes meshes = ConnectOrDie(hosts, 500);
  const std::vector<Bytes> inputs = Inputs(3, DataType::kFloat32, 999, 9);
  for (AllreduceAlgorithm a : kAlgorithms) {
    const std::vector<Bytes> avg =
        RunAllreduce(meshes, inputs, 999, DataType::kFloat32, ReduceOp::kAverage, a);
    const std::vector<Bytes> sum =
        RunAllreduce(meshes, inputs, 999, DataType::kFloat32, ReduceOp::kSum, a);
    REQUIRE(avg == sum);
  }
}

TEST_CASE("ReduceScatterInPlace reduces each host's block in ring order, uneven blocks too") {
  for (int n : kHostCounts) {
    LocalHosts hosts(n, SmallChunks());
    Meshes meshes = ConnectOrDie(hosts, 600 + n);
    const std::vector<std::vector<size_t>> layouts = {std::vector<size_t>(n, 1000),
                                                      std::vector<size_t>(n, 0),
                                                      {5, 0, 1777, 3, 0, 1, 2, 9},
                                                      {0, 0, 0, 4099, 0, 0, 0, 1},
                                                      {1, 2, 3, 40000, 5, 6, 7, 8}};
    uint64_t salt = 0;
    for (std::vector<size_t> counts : layouts) {
      counts.resize(n);
      const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          INFO("n=" << n << " total=" << total << " dtype=" << static_cast<int>(dtype));
          const std::vector<Bytes> inputs = Inputs(n, dtype, total, ++salt);
          const Bytes expected = RingReference(inputs, counts, dtype, op);
          std::vector<Bytes> bufs = inputs;
          REQUIRE(AllOk(RunOnHosts(n, [&](int h) {
            return ReduceScatterInPlace(*meshes[h], bufs[h].data(), counts, dtype, op);
          })));
          const size_t esize = SizeOf(dtype);
          size_t offset = 0;
          for (int h = 0; h < n; ++h) {
            const size_t bytes = counts[h] * esize;
            REQUIRE(std::memcmp(bufs[h].data() + offset, expected.data() + offset, bytes) == 0);
            offset += bytes;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ard::dataplane::tcp
