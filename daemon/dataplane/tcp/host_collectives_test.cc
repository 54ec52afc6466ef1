#include "daemon/dataplane/tcp/host_collectives.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "catch2/catch.hpp"
#include "daemon/collectives/adasum.h"
#include "daemon/collectives/half_float.h"
#include "daemon/collectives/reduce_kernels.h"
#include "daemon/dataplane/tcp/mesh_fixture.h"

namespace ard::dataplane::tcp {
namespace {

using wire::DataType;
using wire::ReduceOp;
using Bytes = std::vector<uint8_t>;
using Meshes = std::vector<std::unique_ptr<TcpMesh>>;

size_t SizeOf(DataType dtype) { return wire::DataTypeSize(static_cast<uint32_t>(dtype)); }

Meshes ConnectOrDie(LocalHosts& hosts, uint64_t job_id) {
  REQUIRE(hosts.start_status().ok());
  absl::StatusOr<Meshes> meshes = hosts.ConnectAll(job_id);
  INFO(meshes.status().ToString());
  REQUIRE(meshes.ok());
  return std::move(*meshes);
}

// Values of very different magnitudes (so that the order of a float sum shows in the bits),
// with signed zeros (Min/Max keep the dst operand between -0 and +0) and a few infinities/NaNs.
float RandomFloat(std::mt19937_64& rng, int max_exponent) {
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

Bytes RandomInput(DataType dtype, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes out(count * SizeOf(dtype));
  for (size_t i = 0; i < count; ++i) {
    if (dtype == DataType::kFloat32) {
      const float v = RandomFloat(rng, 20);
      std::memcpy(out.data() + 4 * i, &v, 4);
    } else if (dtype == DataType::kFloat16) {
      const uint16_t v = collectives::FloatToHalf(RandomFloat(rng, 6));
      std::memcpy(out.data() + 2 * i, &v, 2);
    } else {  // integers: random bits
      const uint64_t v = rng();
      std::memcpy(out.data() + SizeOf(dtype) * i, &v, SizeOf(dtype));
    }
  }
  return out;
}

// The canonical result: ((x0 op x1) op x2) ... in host order.
Bytes HostOrderReduction(const std::vector<Bytes>& inputs, size_t count, DataType dtype,
                         ReduceOp op) {
  Bytes acc = inputs[0];
  for (size_t h = 1; h < inputs.size(); ++h) {
    collectives::ReduceInto(acc.data(), inputs[h].data(), count, dtype, op);
  }
  return acc;
}

std::vector<Bytes> Inputs(int n, DataType dtype, size_t count, uint64_t salt) {
  std::vector<Bytes> inputs;
  for (int h = 0; h < n; ++h) inputs.push_back(RandomInput(dtype, count, salt * 131 + h));
  return inputs;
}

HostCollectiveOptions ForcedChunks() {
  HostCollectiveOptions options;
  options.direct_allreduce_bytes = 0;  // always reduce-scatter + allgather
  options.chunk_bytes = 256;           // many pieces even for small buffers
  return options;
}

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

TEST_CASE("AllreduceInPlace gives the host-order reduction, bit-identical on every host") {
  const DataType dtypes[] = {DataType::kFloat32, DataType::kFloat16, DataType::kInt64};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
  for (int n = 1; n <= 4; ++n) {
    LocalHosts hosts(n);
    Meshes meshes = ConnectOrDie(hosts, 200 + n);
    uint64_t salt = 0;
    for (DataType dtype : dtypes) {
      for (ReduceOp op : ops) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{30011}}) {
          for (bool forced : {false, true}) {
            INFO("n=" << n << " dtype=" << static_cast<int>(dtype) << " op=" << static_cast<int>(op)
                      << " count=" << count << " forced=" << forced);
            const std::vector<Bytes> inputs = Inputs(n, dtype, count, ++salt);
            const Bytes expected = HostOrderReduction(inputs, count, dtype, op);
            std::vector<Bytes> bufs = inputs;
            auto statuses = RunOnHosts(n, [&](int h) {
              return AllreduceInPlace(*meshes[h], bufs[h].data(), count, dtype, op,
                                      forced ? ForcedChunks() : HostCollectiveOptions{});
            });
            REQUIRE(AllOk(statuses));
            for (int h = 0; h < n; ++h) REQUIRE(bufs[h] == expected);
          }
        }
      }
    }
  }
}

TEST_CASE("AllreduceInPlace of 20 MiB (several 4 MiB pieces) matches the reference") {
  const size_t count = (20u << 20) / 4 + 3;
  for (int n = 2; n <= 4; ++n) {
    INFO("n=" << n);
    LocalHosts hosts(n);
    Meshes meshes = ConnectOrDie(hosts, 300 + n);
    const std::vector<Bytes> inputs = Inputs(n, DataType::kFloat32, count, 77 + n);
    const Bytes expected = HostOrderReduction(inputs, count, DataType::kFloat32, ReduceOp::kSum);
    std::vector<Bytes> bufs = inputs;
    auto statuses = RunOnHosts(n, [&](int h) {
      return AllreduceInPlace(*meshes[h], bufs[h].data(), count, DataType::kFloat32,
                              ReduceOp::kSum);
    });
    REQUIRE(AllOk(statuses));
    for (int h = 0; h < n; ++h) REQUIRE(bufs[h] == expected);
  }
}

TEST_CASE("The reference order is observable: a reversed host order gives other bits") {
  const size_t count = 1001;
  const std::vector<Bytes> inputs = Inputs(3, DataType::kFloat32, count, 5);
  const std::vector<Bytes> reversed(inputs.rbegin(), inputs.rend());
  REQUIRE(HostOrderReduction(inputs, count, DataType::kFloat32, ReduceOp::kSum) !=
          HostOrderReduction(reversed, count, DataType::kFloat32, ReduceOp::kSum));
}

TEST_CASE("AllreduceInPlace reduces kAverage like kSum (scaling is the caller's)") {
  LocalHosts hosts(3);
  Meshes meshes = ConnectOrDie(hosts, 400);
  const std::vector<Bytes> inputs = Inputs(3, DataType::kFloat32, 999, 9);
  std::vector<Bytes> bufs = inputs;
  REQUIRE(AllOk(RunOnHosts(3, [&](int h) {
    return AllreduceInPlace(*meshes[h], bufs[h].data(), 999, DataType::kFloat32, ReduceOp::kAverage,
                            ForcedChunks());
  })));
  const Bytes sum = HostOrderReduction(inputs, 999, DataType::kFloat32, ReduceOp::kSum);
  for (const Bytes& b : bufs) REQUIRE(b == sum);
}

TEST_CASE("AdasumInPlace gives each tensor the tree over hosts in host order, on every host") {
  const std::vector<size_t> counts = {37, 5, 0, 300};  // packed tensors, each its own tree
  const size_t total = 342;
  for (int n = 1; n <= 5; ++n) {
    LocalHosts hosts(n);
    Meshes meshes = ConnectOrDie(hosts, 450 + n);
    std::vector<std::vector<double>> inputs(n, std::vector<double>(total));
    std::mt19937_64 rng(n);
    std::uniform_real_distribution<double> value(-1, 1);
    for (auto& in : inputs) {
      for (double& v : in) v = value(rng);
    }
    std::vector<std::vector<double>> bufs = inputs;
    REQUIRE(AllOk(RunOnHosts(n, [&](int h) {
      return AdasumInPlace(*meshes[h], bufs[h].data(), counts, DataType::kFloat64);
    })));
    std::vector<double> want(total);
    size_t offset = 0;
    for (size_t c : counts) {
      std::vector<const void*> leaves;
      for (int h = 0; h < n; ++h) leaves.push_back(inputs[h].data() + offset);
      collectives::AdasumTree(leaves, c, DataType::kFloat64, want.data() + offset);
      offset += c;
    }
    for (int h = 0; h < n; ++h) REQUIRE(bufs[h] == want);
  }
  LocalHosts hosts(2);
  Meshes meshes = ConnectOrDie(hosts, 460);
  std::vector<int32_t> ints(4);
  REQUIRE(AdasumInPlace(*meshes[0], ints.data(), {4}, DataType::kInt32).code() ==
          absl::StatusCode::kInvalidArgument);
}

TEST_CASE("ReduceScatterInPlace reduces each host's block, uneven and zero-sized blocks too") {
  for (int n = 1; n <= 4; ++n) {
    LocalHosts hosts(n);
    Meshes meshes = ConnectOrDie(hosts, 500 + n);
    const std::vector<std::vector<size_t>> layouts = {std::vector<size_t>(n, 1000),
                                                      std::vector<size_t>(n, 0),
                                                      {5, 0, 1777, 3},
                                                      {0, 0, 0, 4099},
                                                      {1, 2, 3, 40000}};
    uint64_t salt = 0;
    for (std::vector<size_t> counts : layouts) {
      counts.resize(n);
      const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
      for (DataType dtype : {DataType::kFloat32, DataType::kFloat16, DataType::kInt64}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
          for (bool forced : {false, true}) {
            INFO("n=" << n << " total=" << total << " dtype=" << static_cast<int>(dtype));
            const std::vector<Bytes> inputs = Inputs(n, dtype, total, ++salt);
            const Bytes expected = HostOrderReduction(inputs, total, dtype, op);
            std::vector<Bytes> bufs = inputs;
            REQUIRE(AllOk(RunOnHosts(n, [&](int h) {
              return ReduceScatterInPlace(*meshes[h], bufs[h].data(), counts, dtype, op,
                                          forced ? ForcedChunks() : HostCollectiveOptions{});
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
}

TEST_CASE("AllgatherV, Broadcast and AlltoallV deliver every block, including empty ones") {
  for (int n = 1; n <= 4; ++n) {
    INFO("n=" << n);
    LocalHosts hosts(n);
    Meshes meshes = ConnectOrDie(hosts, 600 + n);
    // AllgatherV
    for (std::vector<size_t> sizes : std::vector<std::vector<size_t>>{
             {0, 0, 0, 0}, {1, 0, 3, 0}, {5000, 1, 0, 3u << 20}, {7, 7, 7, 7}}) {
      sizes.resize(n);
      const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t{0});
      const Bytes expected = RandomInput(DataType::kUint8, total, total + n);
      std::vector<Bytes> bufs(n, Bytes(total, 0xEE));
      size_t offset = 0;
      for (int h = 0; h < n; ++h) {
        std::memcpy(bufs[h].data() + offset, expected.data() + offset, sizes[h]);
        offset += sizes[h];
      }
      REQUIRE(AllOk(
          RunOnHosts(n, [&](int h) { return AllgatherV(*meshes[h], bufs[h].data(), sizes); })));
      for (int h = 0; h < n; ++h) REQUIRE(bufs[h] == expected);
    }
    // Broadcast from every root.
    for (int root = 0; root < n; ++root) {
      for (size_t bytes : {size_t{0}, size_t{1}, (size_t{1} << 20) + 3}) {
        const Bytes expected = RandomInput(DataType::kUint8, bytes, root * 10 + bytes);
        std::vector<Bytes> bufs(n, Bytes(bytes, 0));
        bufs[root] = expected;
        REQUIRE(AllOk(RunOnHosts(
            n, [&](int h) { return Broadcast(*meshes[h], bufs[h].data(), bytes, root); })));
        for (int h = 0; h < n; ++h) REQUIRE(bufs[h] == expected);
      }
    }
    // AlltoallV: block (src -> dst) has Size(src, dst) bytes of Fill(src, dst).
    auto size_of = [](int src, int dst) -> size_t { return (src * 3 + dst * 5) % 4 * 70001; };
    auto fill = [](int src, int dst) { return static_cast<uint8_t>(16 * src + dst + 1); };
    std::vector<Bytes> recv(n);
    REQUIRE(AllOk(RunOnHosts(n, [&](int h) {
      std::vector<size_t> send_bytes(n), recv_bytes(n);
      Bytes send;
      for (int p = 0; p < n; ++p) {
        send_bytes[p] = size_of(h, p);
        recv_bytes[p] = size_of(p, h);
        send.insert(send.end(), send_bytes[p], fill(h, p));
      }
      recv[h].assign(std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t{0}), 0);
      return AlltoallV(*meshes[h], send.data(), send_bytes, recv[h].data(), recv_bytes);
    })));
    for (int h = 0; h < n; ++h) {
      Bytes expected;
      for (int p = 0; p < n; ++p) expected.insert(expected.end(), size_of(p, h), fill(p, h));
      REQUIRE(recv[h] == expected);
    }
  }
}

TEST_CASE("Barrier returns only once every host has entered it") {
  for (int n = 1; n <= 4; ++n) {
    LocalHosts hosts(n);
    Meshes meshes = ConnectOrDie(hosts, 700 + n);
    for (int round = 1; round <= 5; ++round) {
      std::atomic<int> entered{0};
      std::atomic<bool> early{false};
      REQUIRE(AllOk(RunOnHosts(n, [&](int h) {
        entered++;
        absl::Status s = Barrier(*meshes[h]);
        if (entered.load() != n) early = true;
        return s;
      })));
      REQUIRE_FALSE(early.load());
    }
  }
}

TEST_CASE("Allreduces of two jobs run concurrently over the same listeners") {
  const int n = 3;
  const size_t count = 300001;
  LocalHosts hosts(n);
  REQUIRE(hosts.start_status().ok());
  std::vector<Meshes> jobs(2);
  REQUIRE(AllOk(RunOnHosts(2, [&](int job) -> absl::Status {
    auto meshes = hosts.ConnectAll(800 + job);
    if (!meshes.ok()) return meshes.status();
    jobs[job] = std::move(*meshes);
    return absl::OkStatus();
  })));
  std::vector<std::vector<Bytes>> inputs = {Inputs(n, DataType::kFloat32, count, 1),
                                            Inputs(n, DataType::kFloat32, count, 2)};
  std::vector<std::vector<Bytes>> bufs = inputs;
  REQUIRE(AllOk(RunOnHosts(2 * n, [&](int i) {
    return AllreduceInPlace(*jobs[i / n][i % n], bufs[i / n][i % n].data(), count,
                            DataType::kFloat32, ReduceOp::kSum);
  })));
  for (int job = 0; job < 2; ++job) {
    const Bytes expected =
        HostOrderReduction(inputs[job], count, DataType::kFloat32, ReduceOp::kSum);
    for (int h = 0; h < n; ++h) REQUIRE(bufs[job][h] == expected);
  }
}

TEST_CASE("Abort from another thread unblocks a host whose peer never joins the allreduce") {
  LocalHosts hosts(2);
  Meshes meshes = ConnectOrDie(hosts, 900);
  Bytes buf(1 << 20);
  absl::Status result;
  const absl::Time start = absl::Now();
  std::thread stuck([&] {
    result = AllreduceInPlace(*meshes[0], buf.data(), buf.size() / 4, DataType::kFloat32,
                              ReduceOp::kSum);
  });
  absl::SleepFor(absl::Milliseconds(100));  // let it block (the outcome is the same if not)
  meshes[0]->Abort(absl::AbortedError("job 900 aborted: host 1 left"));
  stuck.join();
  REQUIRE(absl::Now() - start < absl::Seconds(2));
  REQUIRE(result.code() == absl::StatusCode::kAborted);
  REQUIRE(Contains(result, "host 1 left"));
}

TEST_CASE("A host that closes mid-collective fails the others with Unavailable naming it") {
  for (int n = 2; n <= 3; ++n) {
    INFO("n=" << n);
    LocalHosts hosts(n);
    Meshes meshes = ConnectOrDie(hosts, 1000 + n);
    const int dead = n - 1;
    std::vector<Bytes> bufs(n, Bytes(4 << 20));
    auto statuses = RunOnHosts(n, [&](int h) -> absl::Status {
      if (h == dead) {
        meshes[h].reset();
        return absl::OkStatus();
      }
      return AllreduceInPlace(*meshes[h], bufs[h].data(), bufs[h].size() / 4, DataType::kFloat32,
                              ReduceOp::kSum);
    });
    // Every survivor fails; the first to notice names the dead host (a later one may instead
    // name a survivor that shut its sockets down on failing).
    bool named = false;
    for (int h = 0; h < dead; ++h) {
      INFO(statuses[h].ToString());
      REQUIRE(statuses[h].code() == absl::StatusCode::kUnavailable);
      named = named || Contains(statuses[h], "lost host " + std::to_string(dead));
    }
    REQUIRE(named);
  }
}

TEST_CASE("Host collectives reject inconsistent arguments before moving any byte") {
  LocalHosts hosts(2);
  Meshes meshes = ConnectOrDie(hosts, 1100);
  Bytes buf(64);
  TcpMesh& mesh = *meshes[0];
  REQUIRE(ReduceScatterInPlace(mesh, buf.data(), {1, 2, 3}, DataType::kFloat32, ReduceOp::kSum)
              .code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(AllreduceInPlace(mesh, buf.data(), 8, DataType::kBool, ReduceOp::kSum).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(Broadcast(mesh, buf.data(), 8, 2).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(AlltoallV(mesh, buf.data(), {1, 1}, buf.data() + 8, {2, 1}).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(AllgatherV(mesh, buf.data(), {1}).code() == absl::StatusCode::kInvalidArgument);
  // The mesh still works.
  REQUIRE(AllOk(RunOnHosts(2, [&](int h) { return Barrier(*meshes[h]); })));
}

}  // namespace
}  // namespace ard::dataplane::tcp
