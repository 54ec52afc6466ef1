#include "daemon/dataplane/tcp/tcp_mesh.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "catch2/catch.hpp"
#include "daemon/common/logging.h"
#include "daemon/dataplane/tcp/mesh_fixture.h"
#include "spdlog/sinks/ostream_sink.h"

namespace ard::dataplane::tcp {
namespace {

using Meshes = std::vector<std::unique_ptr<TcpMesh>>;

Meshes ConnectOrDie(LocalHosts& hosts, uint64_t job_id, TcpMeshOptions options = {}) {
  REQUIRE(hosts.start_status().ok());
  absl::StatusOr<Meshes> meshes = hosts.ConnectAll(job_id, options);
  INFO(meshes.status().ToString());
  REQUIRE(meshes.ok());
  return std::move(*meshes);
}

// Bytes that identify (sender, receiver, position).
std::vector<uint8_t> Pattern(int from, int to, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(i * 31 + from * 7 + to * 13);
  return v;
}

bool Contains(const absl::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

TEST_CASE("TcpMesh connects 1-4 hosts and exchanges around a ring, any size") {
  for (int n = 1; n <= 4; ++n) {
    LocalHosts hosts(n);
    Meshes meshes = ConnectOrDie(hosts, 100 + n);
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{4097}, size_t{24} << 20}) {
      INFO("n=" << n << " bytes=" << bytes);
      std::vector<std::vector<uint8_t>> got(n, std::vector<uint8_t>(bytes));
      auto statuses = RunOnHosts(n, [&](int h) {
        if (n == 1) return meshes[h]->Exchange(-1, nullptr, 0, -1, nullptr, 0);
        const int next = (h + 1) % n, prev = (h + n - 1) % n;
        const std::vector<uint8_t> out = Pattern(h, next, bytes);
        return meshes[h]->Exchange(next, out.data(), bytes, prev, got[h].data(), bytes);
      });
      REQUIRE(AllOk(statuses));
      for (int h = 0; h < n && n > 1; ++h) REQUIRE(got[h] == Pattern((h + n - 1) % n, h, bytes));
    }
  }
}

TEST_CASE("TcpMesh Exchange with the same peer both ways does not deadlock on large sizes") {
  LocalHosts hosts(2);
  Meshes meshes = ConnectOrDie(hosts, 7);
  // Formation already moved bytes (the algorithm-settings check); count from here.
  uint64_t sent_before[2], received_before[2];
  for (int h = 0; h < 2; ++h) {
    sent_before[h] = hosts.listener(h).traffic()->sent_bytes.load();
    received_before[h] = hosts.listener(h).traffic()->received_bytes.load();
  }
  const size_t bytes = size_t{48} << 20;  // far beyond the socket buffers
  std::vector<std::vector<uint8_t>> got(2, std::vector<uint8_t>(bytes));
  auto statuses = RunOnHosts(2, [&](int h) {
    const std::vector<uint8_t> out = Pattern(h, 1 - h, bytes);
    return meshes[h]->Exchange(1 - h, out.data(), bytes, 1 - h, got[h].data(), bytes);
  });
  REQUIRE(AllOk(statuses));
  REQUIRE(got[0] == Pattern(1, 0, bytes));
  REQUIRE(got[1] == Pattern(0, 1, bytes));
  // Each host's listener counts its meshes' traffic (the daemon's data-plane metrics), checksum
  // included.
  const size_t wire = bytes + TcpMesh::kChecksumBytes;
  for (int h = 0; h < 2; ++h) {
    CHECK(hosts.listener(h).traffic()->sent_bytes.load() - sent_before[h] == wire);
    CHECK(hosts.listener(h).traffic()->received_bytes.load() - received_before[h] == wire);
  }
}

TEST_CASE("TcpMesh Transfer moves several ranges per peer in order, to all peers at once") {
  const int n = 4;
  LocalHosts hosts(n);
  Meshes meshes = ConnectOrDie(hosts, 8);
  const size_t a = 1000, b = 300001;  // two ranges per (sender, receiver)
  std::vector<std::vector<uint8_t>> got(n, std::vector<uint8_t>(n * (a + b)));
  auto statuses = RunOnHosts(n, [&](int h) {
    std::vector<std::vector<uint8_t>> out(n);
    std::vector<TcpMesh::Send> sends;
    std::vector<TcpMesh::Recv> recvs;
    for (int p = 0; p < n; ++p) {
      if (p == h) continue;
      out[p] = Pattern(h, p, a + b);
      sends.push_back({p, out[p].data(), a});
      sends.push_back({p, out[p].data() + a, b});
      recvs.push_back({p, got[h].data() + p * (a + b), a});
      recvs.push_back({p, got[h].data() + p * (a + b) + a, b});
    }
    return meshes[h]->Transfer(sends, recvs);
  });
  REQUIRE(AllOk(statuses));
  for (int h = 0; h < n; ++h) {
    for (int p = 0; p < n; ++p) {
      if (p == h) continue;
      std::vector<uint8_t> block(got[h].begin() + p * (a + b), got[h].begin() + (p + 1) * (a + b));
      REQUIRE(block == Pattern(p, h, a + b));
    }
  }
}

TEST_CASE("TcpMesh meshes of two jobs connect and run concurrently on the same listeners") {
  const int n = 3;
  LocalHosts hosts(n);
  std::vector<Meshes> jobs(2);
  std::vector<std::vector<std::vector<uint8_t>>> got(2, std::vector<std::vector<uint8_t>>(n));
  auto statuses = RunOnHosts(2 * n, [&](int i) -> absl::Status {
    const int job = i / n, h = i % n;
    if (h == 0) {
      auto meshes = hosts.ConnectAll(1000 + job);
      if (!meshes.ok()) return meshes.status();
      jobs[job] = std::move(*meshes);
      return absl::OkStatus();
    }
    return absl::OkStatus();
  });
  REQUIRE(AllOk(statuses));
  const size_t bytes = 1 << 20;
  statuses = RunOnHosts(2 * n, [&](int i) {
    const int job = i / n, h = i % n;
    const int next = (h + 1) % n, prev = (h + n - 1) % n;
    got[job][h].resize(bytes);
    const std::vector<uint8_t> out = Pattern(h + 10 * job, next, bytes);
    return jobs[job][h]->Exchange(next, out.data(), bytes, prev, got[job][h].data(), bytes);
  });
  REQUIRE(AllOk(statuses));
  for (int job = 0; job < 2; ++job) {
    for (int h = 0; h < n; ++h)
      REQUIRE(got[job][h] == Pattern((h + n - 1) % n + 10 * job, h, bytes));
  }
}

TEST_CASE("TcpMesh Abort from another thread unblocks a host waiting on a silent peer") {
  LocalHosts hosts(2);
  TcpMeshOptions options;
  options.progress_timeout = absl::Seconds(60);
  Meshes meshes = ConnectOrDie(hosts, 9, options);
  std::vector<uint8_t> buf(1024);
  absl::Status result;
  const absl::Time start = absl::Now();
  std::thread stuck([&] { result = meshes[0]->Exchange(-1, nullptr, 0, 1, buf.data(), 1024); });
  absl::SleepFor(absl::Milliseconds(100));  // let it block (the outcome is the same if not)
  meshes[0]->Abort(absl::AbortedError("job 9 aborted by the coordinator"));
  stuck.join();
  REQUIRE(absl::Now() - start < absl::Seconds(2));
  REQUIRE(result.code() == absl::StatusCode::kAborted);
  REQUIRE(Contains(result, "aborted by the coordinator"));
  // Later calls keep failing with the same status; a second Abort changes nothing.
  meshes[0]->Abort(absl::InternalError("ignored"));
  REQUIRE(meshes[0]->Exchange(1, buf.data(), 1, -1, nullptr, 0).code() ==
          absl::StatusCode::kAborted);
}

TEST_CASE("TcpMesh reports a peer that closes mid-transfer as Unavailable naming it") {
  LocalHosts hosts(2);
  Meshes meshes = ConnectOrDie(hosts, 10);
  const size_t bytes = 8 << 20;
  std::vector<uint8_t> buf(bytes);
  auto statuses = RunOnHosts(2, [&](int h) -> absl::Status {
    if (h == 0) return meshes[0]->Exchange(-1, nullptr, 0, 1, buf.data(), bytes);
    const std::vector<uint8_t> part(1000, 1);
    absl::Status s = meshes[1]->Exchange(0, part.data(), part.size(), -1, nullptr, 0);
    meshes[1].reset();  // dies with the rest unsent
    return s;
  });
  REQUIRE(statuses[1].ok());
  REQUIRE(statuses[0].code() == absl::StatusCode::kUnavailable);
  REQUIRE(Contains(statuses[0], "host 1"));
  // The mesh is poisoned.
  REQUIRE(meshes[0]->Exchange(-1, nullptr, 0, 1, buf.data(), 1).code() ==
          absl::StatusCode::kFailedPrecondition);
}

// The data plane's warnings (Logger "dataplane") while alive.
class WarningCapture {
 public:
  WarningCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    sink_->set_level(spdlog::level::warn);
    Logger("dataplane")->sinks().push_back(sink_);
  }
  ~WarningCapture() {
    auto& sinks = Logger("dataplane")->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

TEST_CASE("TcpMesh: a peer that closed between transfers (a normal job end) is no warning") {
  LocalHosts hosts(2);
  Meshes meshes = ConnectOrDie(hosts, 12);
  WarningCapture warnings;
  meshes[1].reset();  // host 1's job ended: its connections close cleanly
  uint8_t byte = 0;
  absl::Status s = meshes[0]->Exchange(1, &byte, 1, 1, &byte, 1);
  REQUIRE(s.code() == absl::StatusCode::kUnavailable);
  CHECK(warnings.text().empty());
}

TEST_CASE("TcpMesh times out when no byte moves, naming the peers it waited on") {
  WarningCapture warnings;
  LocalHosts hosts(3);
  TcpMeshOptions options;
  options.progress_timeout = absl::Milliseconds(200);
  Meshes meshes = ConnectOrDie(hosts, 11, options);
  std::vector<uint8_t> buf(16);
  absl::Status s = meshes[0]->Exchange(-1, nullptr, 0, 2, buf.data(), buf.size());
  REQUIRE(s.code() == absl::StatusCode::kDeadlineExceeded);
  REQUIRE(Contains(s, "receive from hosts [2]"));
  CHECK(warnings.text().find("tcp mesh failed") != std::string::npos);  // a real failure warns
}

TEST_CASE("TcpMesh rejects bad peer indexes without poisoning the mesh") {
  LocalHosts hosts(2);
  Meshes meshes = ConnectOrDie(hosts, 12);
  uint8_t byte = 0;
  REQUIRE(meshes[0]->Exchange(0, &byte, 1, -1, nullptr, 0).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(meshes[0]->Exchange(2, &byte, 1, -1, nullptr, 0).code() ==
          absl::StatusCode::kInvalidArgument);
  auto statuses = RunOnHosts(2, [&](int h) {
    uint8_t in = 0, out = static_cast<uint8_t>(h + 1);
    absl::Status s = meshes[h]->Exchange(1 - h, &out, 1, 1 - h, &in, 1);
    if (s.ok() && in != 2 - h) return absl::InternalError("wrong byte");
    return s;
  });
  REQUIRE(AllOk(statuses));
}

TEST_CASE("TcpMesh connects only its O(log n) mesh peers and refuses transfers with others") {
  const int n = 8;
  LocalHosts hosts(n);
  Meshes meshes = ConnectOrDie(hosts, 14);
  for (int h = 0; h < n; ++h) REQUIRE(meshes[h]->peers() == MeshPeers(h, n));
  REQUIRE(meshes[0]->peers() == std::vector<int>{1, 2, 4, 7});
  uint8_t byte = 0;
  absl::Status s = meshes[0]->Exchange(3, &byte, 1, -1, nullptr, 0);
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(Contains(s, "not one of its mesh peers"));
  // Every mesh edge carries bytes both ways.
  auto statuses = RunOnHosts(n, [&](int h) {
    std::vector<uint8_t> in(n, 0), out(n, static_cast<uint8_t>(h + 1));
    std::vector<TcpMesh::Send> sends;
    std::vector<TcpMesh::Recv> recvs;
    for (int p : meshes[h]->peers()) {
      sends.push_back({p, &out[p], 1});
      recvs.push_back({p, &in[p], 1});
    }
    absl::Status s = meshes[h]->Transfer(sends, recvs);
    for (int p : meshes[h]->peers()) {
      if (s.ok() && in[p] != p + 1) return absl::InternalError("wrong byte");
    }
    return s;
  });
  REQUIRE(AllOk(statuses));
}

TEST_CASE("TcpMesh Connect fails when a peer runs other algorithm settings") {
  std::vector<DataListenerOptions> options(3);
  options[2].algorithms.allreduce = AllreduceAlgorithm::kRing;
  LocalHosts hosts(options);
  REQUIRE(hosts.start_status().ok());
  absl::StatusOr<Meshes> meshes = hosts.ConnectAll(15);
  REQUIRE(meshes.status().code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(Contains(meshes.status(), "different algorithm settings"));
}

TEST_CASE("TcpMesh fails a transfer with DataLoss naming the host when the stream is off") {
  LocalHosts hosts(2);
  Meshes meshes = ConnectOrDie(hosts, 16);
  const size_t bytes = 1000;
  size_t sent = bytes;
  SECTION("bytes past the transfer's end") { sent = bytes + 8; }
  SECTION("a transfer cut short") { sent = bytes - 8; }
  std::vector<uint8_t> out = Pattern(0, 1, sent), in(bytes);
  absl::Status receiver;
  std::thread host1([&] { receiver = meshes[1]->Exchange(-1, nullptr, 0, 0, in.data(), bytes); });
  // The sender's transfer completes (its bytes fit the socket buffers); what follows it (a
  // second transfer) is read by the receiver as the rest of the first.
  REQUIRE(meshes[0]->Exchange(1, out.data(), sent, -1, nullptr, 0).ok());
  REQUIRE(meshes[0]->Exchange(1, out.data(), sent, -1, nullptr, 0).ok());
  host1.join();
  REQUIRE(receiver.code() == absl::StatusCode::kDataLoss);
  REQUIRE(Contains(receiver, "host 1 received a corrupt stream from host 0"));
  // The mesh is poisoned: nothing of the stream is used again.
  REQUIRE(meshes[1]->Exchange(-1, nullptr, 0, 0, in.data(), bytes).code() ==
          absl::StatusCode::kFailedPrecondition);
}

MeshJob Job(uint64_t job_id) { return MeshJob{job_id, 1, *NewJobSecret()}; }

TEST_CASE("TcpMesh Connect fails naming the host when the hosts hold different job secrets") {
  LocalHosts hosts(2);
  REQUIRE(hosts.start_status().ok());
  const MeshJob mine = Job(14);
  MeshJob theirs = mine;
  SECTION("another secret") { theirs.secret = *NewJobSecret(); }
  SECTION("another generation") { theirs.generation = 2; }
  absl::Status dialer, acceptor;
  std::thread host1([&] {
    acceptor = TcpMesh::Connect(theirs, 1, hosts.addresses(), hosts.listener(1), absl::Seconds(3))
                   .status();
  });
  dialer =
      TcpMesh::Connect(mine, 0, hosts.addresses(), hosts.listener(0), absl::Seconds(10)).status();
  host1.join();
  REQUIRE(dialer.code() == absl::StatusCode::kUnauthenticated);
  REQUIRE(Contains(dialer, "host 0 cannot connect to host 1"));
  REQUIRE(acceptor.code() == absl::StatusCode::kDeadlineExceeded);
  REQUIRE(Contains(acceptor, "host 0"));
  REQUIRE(hosts.listener(1).rejected(RejectReason::kBadProof) +
              hosts.listener(1).rejected(RejectReason::kWrongGeneration) ==
          1);
}

TEST_CASE("TcpMesh Connect fails with a deadline naming a host that never connects") {
  LocalHosts hosts(2);
  REQUIRE(hosts.start_status().ok());
  SECTION("the dialing peer never comes") {
    auto mesh =
        TcpMesh::Connect(Job(13), 1, hosts.addresses(), hosts.listener(1), absl::Milliseconds(200));
    REQUIRE(mesh.status().code() == absl::StatusCode::kDeadlineExceeded);
    REQUIRE(Contains(mesh.status(), "host 0"));
  }
  SECTION("the peer's port refuses connections") {
    std::vector<std::string> addresses = hosts.addresses();
    const int closed_port = hosts.listener(1).port();
    hosts.listener(1).Stop();
    addresses[1] = "127.0.0.1:" + std::to_string(closed_port);
    auto mesh = TcpMesh::Connect(Job(13), 0, addresses, hosts.listener(0), absl::Milliseconds(300));
    REQUIRE(mesh.status().code() == absl::StatusCode::kDeadlineExceeded);
    REQUIRE(Contains(mesh.status(), "host 1"));
  }
  SECTION("no secret") {
    MeshJob job = Job(13);
    job.secret.clear();
    REQUIRE(TcpMesh::Connect(job, 0, hosts.addresses(), hosts.listener(0), absl::Seconds(1))
                .status()
                .code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("bad arguments") {
    REQUIRE(TcpMesh::Connect(Job(13), 2, hosts.addresses(), hosts.listener(0), absl::Seconds(1))
                .status()
                .code() == absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace ard::dataplane::tcp
