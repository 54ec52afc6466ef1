#include "daemon/dataplane/tcp/host_collectives.h"

#include <unistd.h>

#include <algorithm>
#include <array>
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
#include "daemon/dataplane/tcp/collectives_test_util.h"

namespace ard::dataplane::tcp {
namespace {

using namespace testing;
using wire::DataType;
using wire::ReduceOp;

TEST_CASE("AllgatherV, Broadcast and AlltoallV deliver every block, including empty ones") {
  for (int n : {1, 2, 3, 4, 5, 8}) {
    INFO("n=" << n);
    LocalHosts hosts(n);
    Meshes meshes = ConnectOrDie(hosts, 600 + n);
    // AllgatherV
    for (std::vector<size_t> sizes :
         std::vector<std::vector<size_t>>{{0, 0, 0, 0, 0, 0, 0, 0},
                                          {1, 0, 3, 0, 0, 2, 0, 1},
                                          {5000, 1, 0, 3u << 20, 9, 0, 0, 7},
                                          {7, 7, 7, 7, 7, 7, 7, 7}}) {
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
  for (int n : {1, 2, 3, 4, 5, 8}) {
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
    const Bytes expected = AllreduceReference(AllreduceAlgorithm::kRing, inputs[job], count,
                                              DataType::kFloat32, ReduceOp::kSum);
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
  for (int n : {2, 3, 5, 8}) {
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

// An order-revealing combine (neither commutative nor associative): (lower, higher) -> lower *
// kMix + higher.
constexpr uint64_t kMix = 1000003;

// What recursive doubling's tree gives for `x` with that combine: leaves x_i op x_(i+p), then
// R(lower half) op R(upper half).
uint64_t TreeOf(const std::vector<uint64_t>& x) {
  const int n = static_cast<int>(x.size()), p = PowerOfTwoFloor(n);
  std::vector<uint64_t> v(x.begin(), x.begin() + p);
  for (int i = 0; i + p < n; ++i) v[i] = v[i] * kMix + x[i + p];
  for (int bit = 1; bit < p; bit *= 2) {
    std::vector<uint64_t> next(p);
    for (int i = 0; i < p; ++i) {
      const int lo = std::min(i, i ^ bit), hi = std::max(i, i ^ bit);
      next[i] = v[lo] * kMix + v[hi];
    }
    v = next;
  }
  return v[0];
}

TEST_CASE(
    "CombineInPlace: a round one host starts wakes every idle host; all get the AND, the MAX and "
    "the same (lower op higher) tree") {
  for (int n : {2, 3, 4, 5, 8}) {
    for (int starter = 0; starter < n; starter += 2) {
      INFO("n=" << n << " starter=" << starter);
      LocalHosts hosts(n);
      Meshes meshes = ConnectOrDie(hosts, 1200 + 10 * n + starter);
      std::vector<std::array<uint64_t, 3>> values(n);
      std::vector<uint64_t> leaves(n);
      auto combine = [](uint8_t* mine, const uint8_t* theirs, bool mine_is_lower) {
        uint64_t a[3], b[3];
        std::memcpy(a, mine, sizeof(a));
        std::memcpy(b, theirs, sizeof(b));
        a[0] &= b[0];
        a[1] = std::max(a[1], b[1]);
        a[2] = mine_is_lower ? a[2] * kMix + b[2] : b[2] * kMix + a[2];
        std::memcpy(mine, a, sizeof(a));
      };
      for (int h = 0; h < n; ++h) leaves[h] = 7 + 11 * h;
      REQUIRE(AllOk(RunOnHosts(n, [&](int h) -> absl::Status {
        values[h] = {~(uint64_t{1} << h), static_cast<uint64_t>(10 + h), leaves[h]};
        if (h != starter) {  // idle until a peer's first message arrives
          auto woken = meshes[h]->WaitReadable({}, absl::Seconds(10));
          if (!woken.ok()) return woken.status();
          if (!*woken) return absl::DeadlineExceededError(absl::StrCat("host ", h, " not woken"));
        }
        return CombineInPlace(*meshes[h], values[h].data(), sizeof(values[h]), combine);
      })));
      for (int h = 0; h < n; ++h) {
        CHECK(values[h][0] == ~((uint64_t{1} << n) - 1));
        CHECK(values[h][1] == static_cast<uint64_t>(10 + n - 1));
        CHECK(values[h][2] == TreeOf(leaves));
      }
    }
  }
}

TEST_CASE(
    "WaitReadable: false on timeout and on the caller's own descriptor; true on a peer's close") {
  LocalHosts hosts(2);
  Meshes meshes = ConnectOrDie(hosts, 1300);
  auto idle = meshes[0]->WaitReadable({}, absl::Milliseconds(20));
  REQUIRE(idle.ok());
  CHECK_FALSE(*idle);
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  REQUIRE(::write(pipe_fds[1], "x", 1) == 1);
  auto own = meshes[0]->WaitReadable({pipe_fds[0]}, absl::Seconds(5));
  REQUIRE(own.ok());
  CHECK_FALSE(*own);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  meshes[1].reset();  // the peer died
  auto closed = meshes[0]->WaitReadable({}, absl::Seconds(5));
  REQUIRE(closed.ok());
  CHECK(*closed);
  uint64_t v = 1;
  CHECK(CombineInPlace(*meshes[0], &v, sizeof(v), [](uint8_t*, const uint8_t*, bool) {}).code() ==
        absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ard::dataplane::tcp
