// The GPU path through the real daemon code (DESIGN.md "GPU path"): a Daemon built with the
// host-memory device double (daemon/gpu/testing) serves simulated GPU training processes over its
// real local socket: HELLO/WELCOME, GPU_REGISTER/GPU_REGISTERED, GPU_SUBMIT/COMPLETE, with the
// process's staging arena and pool events on the double. The daemon's readiness table, GPU
// executor and GpuJob run as in production; only CUDA/NCCL are simulated.
//
// All simulated processes share this test's real pid (SO_PEERCRED), so the daemon's IpcCache,
// keyed by pid, closes their mappings when the last of them leaves.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "catch2/catch.hpp"
#include "client/local_wire.h"
#include "daemon/config/config_loader.h"
#include "daemon/daemon.h"
#include "daemon/gpu/testing/fake_process.h"
#include "daemon/gpu/testing/host_device.h"
#include "daemon/local/seqpacket.h"
#include "daemon/rpc/grpc_peer_client.h"

namespace ard {
namespace {

using gpu::testing::FakeProcess;
using gpu::testing::HostDevice;
using gpu::testing::HostWorld;

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ard-gd.XXXXXX";  // short: Unix socket paths are limited to 107 bytes
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

DaemonConfig Config(const TempDir& dir) {
  DaemonConfig c = config::Defaults();
  c.set_cluster_address("127.0.0.1:0");
  c.set_host_name("h");
  c.set_local_socket(dir.path() + "/h.sock");
  c.set_gpu_fusion_buffer_bytes(256);  // small: the fusion buffer grows
  c.set_gpu_comm_init_timeout_ms(5000);
  REQUIRE(config::ValidateAndComplete(&c).ok());
  return c;
}

std::string Frame(wire::MsgType type, uint64_t request_id, const void* payload, size_t bytes,
                  const std::string& tail = "") {
  wire::FrameHeader h{};
  h.magic = wire::kMagic;
  h.version = wire::kVersion;
  h.type = static_cast<uint16_t>(type);
  h.payload_bytes = static_cast<uint32_t>(bytes + tail.size());
  h.request_id = request_id;
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  out.append(static_cast<const char*>(payload), bytes);
  return out + tail;
}

struct Reply {
  wire::MsgType type{};
  uint64_t request_id = 0;
  int32_t code = 0;  // ERROR / NOTIFY / COMPLETE
  std::string message;
  std::vector<int64_t> shape;  // COMPLETE
  uint64_t offset = 0;         // COMPLETE of a host tensor: its result in segment 0
};

// A training process's local connection, speaking the wire protocol directly.
class WireClient {
 public:
  // local_rank/local_size -1: rank/size (every rank on this host).
  WireClient(const std::string& socket_path, const std::string& job, int rank, int size,
             int local_rank = -1, int local_size = -1) {
    fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_path.c_str(), sizeof(addr.sun_path) - 1);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    const int memfd = memfd_create("ard-gd", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(memfd >= 0);
    REQUIRE(ftruncate(memfd, 1 << 16) == 0);
    REQUIRE(fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
    wire::Hello hello{};
    std::strncpy(hello.job, job.c_str(), sizeof(hello.job) - 1);
    hello.rank = rank;
    hello.size = size;
    hello.local_rank = local_rank < 0 ? rank : local_rank;
    hello.local_size = local_size < 0 ? size : local_size;
    hello.pid = static_cast<uint32_t>(getpid());
    hello.segment_bytes = 1 << 16;
    REQUIRE(local::SendMessage(fd_, Frame(wire::MsgType::kHello, 0, &hello, sizeof(hello)), memfd));
    input_ =
        static_cast<char*>(mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0));
    REQUIRE(input_ != MAP_FAILED);
    close(memfd);
  }
  ~WireClient() {
    HangUp();
    munmap(input_, 1 << 16);
    if (results_ != nullptr) munmap(const_cast<char*>(results_), results_bytes_);
  }

  void HangUp() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  // The next frame from the daemon (waits up to 10 s).
  Reply Next() {
    pollfd p{fd_, POLLIN, 0};
    REQUIRE(poll(&p, 1, 10000) == 1);
    auto m = local::RecvMessage(fd_, 1 << 20);
    REQUIRE(m.ok());
    wire::FrameHeader h;
    REQUIRE(m->bytes.size() >= sizeof(h));
    std::memcpy(&h, m->bytes.data(), sizeof(h));
    const char* payload = m->bytes.data() + sizeof(h);
    Reply r;
    r.type = static_cast<wire::MsgType>(h.type);
    r.request_id = h.request_id;
    if (r.type == wire::MsgType::kWelcome && m->fd >= 0) {  // result segment 0, read-only
      wire::Welcome w;
      std::memcpy(&w, payload, sizeof(w));
      results_bytes_ = w.result_segment_bytes;
      void* at = mmap(nullptr, results_bytes_, PROT_READ, MAP_SHARED, m->fd, 0);
      REQUIRE(at != MAP_FAILED);
      results_ = static_cast<const char*>(at);
    }
    if (m->fd >= 0) close(m->fd);
    if (r.type == wire::MsgType::kError || r.type == wire::MsgType::kNotify) {
      wire::Error e;
      std::memcpy(&e, payload, sizeof(e));
      r.code = e.code;
      r.message.assign(payload + sizeof(e), e.message_bytes);
    } else if (r.type == wire::MsgType::kComplete) {
      wire::Complete c;
      std::memcpy(&c, payload, sizeof(c));
      r.code = c.code;
      r.shape.assign(c.shape, c.shape + c.ndims);
      r.offset = c.segment == 0 ? c.offset : UINT64_MAX;
      r.message.assign(payload + sizeof(c) + c.num_splits * sizeof(int64_t), c.message_bytes);
    }
    return r;
  }

  // The next frame of `type`, skipping others (RESULT_SEGMENT, NOTIFY).
  Reply Expect(wire::MsgType type) {
    for (int i = 0; i < 16; ++i) {
      Reply r = Next();
      if (r.type == type) return r;
      INFO("skipped frame type " << static_cast<int>(r.type) << ": " << r.message);
    }
    FAIL("no frame of the expected type");
    return {};
  }

  void Register(const gpu::GpuRegistration& reg, uint64_t request_id) {
    wire::GpuRegister g{};
    g.device = reg.device;
    g.num_events = static_cast<uint32_t>(reg.events.size());
    g.arena_bytes = reg.arena_bytes;
    std::memcpy(g.arena_handle, reg.arena.data(), reg.arena.size());
    std::string tail;
    for (const auto& e : reg.events) tail.append(reinterpret_cast<const char*>(e.data()), e.size());
    REQUIRE(local::SendMessage(
        fd_, Frame(wire::MsgType::kGpuRegister, request_id, &g, sizeof(g), tail), -1));
  }

  // Any collective: `s` as built by Meta().
  void SubmitMeta(uint64_t request_id, const wire::Submit& s, uint64_t offset, uint32_t event) {
    wire::GpuPlacement p{offset, event, 0};
    std::string tail(reinterpret_cast<const char*>(&p), sizeof(p));
    REQUIRE(local::SendMessage(
        fd_, Frame(wire::MsgType::kGpuSubmit, request_id, &s, sizeof(s), tail), -1));
  }

  // A host-memory allreduce (SUBMIT) of float sums from input segment 0 at offset 0.
  void SubmitHost(uint64_t request_id, const std::string& name, const std::vector<float>& values) {
    std::memcpy(input_, values.data(), values.size() * sizeof(float));
    wire::Submit s{};
    s.collective = static_cast<uint32_t>(wire::Collective::kAllreduce);
    s.dtype = static_cast<uint32_t>(wire::DataType::kFloat32);
    s.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kSum);
    s.prescale = s.postscale = 1.0;
    std::strncpy(s.name, name.c_str(), sizeof(s.name) - 1);
    s.ndims = 1;
    s.shape[0] = static_cast<int64_t>(values.size());
    s.bytes = values.size() * sizeof(float);
    s.group_id = -1;
    REQUIRE(local::SendMessage(fd_, Frame(wire::MsgType::kSubmit, request_id, &s, sizeof(s)), -1));
  }
  // A host tensor's result (its COMPLETE's place in result segment 0).
  std::vector<float> HostResult(const Reply& done, size_t count) const {
    REQUIRE(results_ != nullptr);
    REQUIRE(done.offset + count * sizeof(float) <= results_bytes_);
    std::vector<float> out(count);
    std::memcpy(out.data(), results_ + done.offset, count * sizeof(float));
    return out;
  }

  void Submit(uint64_t request_id, const std::string& name, wire::DataType dtype, wire::ReduceOp op,
              int64_t count, uint64_t offset, uint32_t event) {
    wire::Submit s{};
    s.collective = static_cast<uint32_t>(wire::Collective::kAllreduce);
    s.dtype = static_cast<uint32_t>(dtype);
    s.reduce_op = static_cast<uint32_t>(op);
    s.prescale = s.postscale = 1.0;
    std::strncpy(s.name, name.c_str(), sizeof(s.name) - 1);
    s.ndims = 1;
    s.shape[0] = count;
    s.bytes = count * wire::DataTypeSize(s.dtype);
    s.group_id = -1;
    wire::GpuPlacement p{offset, event, 0};
    std::string tail(reinterpret_cast<const char*>(&p), sizeof(p));
    REQUIRE(local::SendMessage(
        fd_, Frame(wire::MsgType::kGpuSubmit, request_id, &s, sizeof(s), tail), -1));
  }

 private:
  int fd_ = -1;
  char* input_ = nullptr;          // input segment 0
  const char* results_ = nullptr;  // result segment 0
  size_t results_bytes_ = 0;
};

wire::Submit Meta(wire::Collective collective, const std::string& name, wire::DataType dtype,
                  std::vector<int64_t> shape) {
  wire::Submit s{};
  s.collective = static_cast<uint32_t>(collective);
  s.dtype = static_cast<uint32_t>(dtype);
  s.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kSum);
  s.prescale = s.postscale = 1.0;
  std::strncpy(s.name, name.c_str(), sizeof(s.name) - 1);
  s.ndims = static_cast<uint32_t>(shape.size());
  int64_t elems = 1;
  for (size_t d = 0; d < shape.size(); ++d) elems *= s.shape[d] = shape[d];
  s.bytes = elems * wire::DataTypeSize(s.dtype);
  s.group_id = -1;
  return s;
}

// Each rank's GPU of job `job` on `host` ("": any) in the cluster status, as `allreducectl
// status` gets it.
std::vector<int> StatusDevices(const Daemon& daemon, const std::string& job,
                               const std::string& host = "") {
  rpc::GrpcPeerClient client(daemon.address(), absl::Seconds(2));
  absl::Notification done;
  std::vector<int> devices;
  client.GetClusterStatusAsync({}, [&](absl::StatusOr<GetClusterStatusResponse> r) {
    if (r.ok()) {
      for (const JobSummary& j : r->view().jobs()) {
        if (j.name() != job) continue;
        for (const auto& hr : j.ranks()) {
          if (host.empty() || hr.host() == host) {
            devices.assign(hr.gpu_devices().begin(), hr.gpu_devices().end());
          }
        }
      }
    }
    done.Notify();
  });
  done.WaitForNotification();
  return devices;
}

// The job's GPU plan in the cluster status (its mode and communicator), as `daemon` sees it.
std::string StatusGpuPlan(const Daemon& daemon, const std::string& job) {
  rpc::GrpcPeerClient client(daemon.address(), absl::Seconds(2));
  absl::Notification done;
  std::string plan;
  client.GetClusterStatusAsync({}, [&](absl::StatusOr<GetClusterStatusResponse> r) {
    if (r.ok()) {
      for (const JobSummary& j : r->view().jobs()) {
        if (j.name() == job) plan = j.gpu_plan();
      }
    }
    done.Notify();
  });
  done.WaitForNotification();
  return plan;
}

// Hosts UP in the cluster, as `daemon` sees it.
int UpHosts(const Daemon& daemon) {
  rpc::GrpcPeerClient client(daemon.address(), absl::Seconds(2));
  absl::Notification done;
  int up = 0;
  client.GetClusterStatusAsync({}, [&](absl::StatusOr<GetClusterStatusResponse> r) {
    if (r.ok()) {
      for (const Host& h : r->view().hosts()) up += h.state() == UP;
    }
    done.Notify();
  });
  done.WaitForNotification();
  return up;
}

template <typename Pred>
bool Eventually(Pred pred) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// One daemon (host "h") on a device double with two GPUs, serving over its local socket `sock`.
struct OneDaemon {
  OneDaemon() { REQUIRE(daemon.Start().ok()); }

  TempDir dir;
  HostWorld world;
  HostDevice device{world, "h", 1, 2};
  Daemon daemon{Config(dir), &device};
  const std::string sock = dir.path() + "/h.sock";
};

TEST_CASE_METHOD(OneDaemon,
                 "GPU allreduce through the daemon: three processes on two GPUs, fused, repeated") {
  // Ranks 0 and 2 share GPU 0: they are reduced through host memory before the communicator.
  std::vector<std::unique_ptr<FakeProcess>> procs;
  std::vector<std::unique_ptr<WireClient>> clients;
  const std::vector<int> gpu_of = {0, 1, 0};
  for (int r = 0; r < 3; ++r) {
    procs.push_back(std::make_unique<FakeProcess>(world, "h", 100 + r, 2, gpu_of[r], r));
    clients.push_back(std::make_unique<WireClient>(sock, "gjob", r, 3));
  }
  for (auto& c : clients) c->Expect(wire::MsgType::kWelcome);
  for (int r = 0; r < 3; ++r) clients[r]->Register(procs[r]->Registration(), 7);
  for (auto& c : clients) {
    Reply reg = c->Next();
    INFO(reg.message);
    REQUIRE(reg.type == wire::MsgType::kGpuRegistered);
    CHECK(reg.request_id == 7);
  }
  CHECK(device.memory_opens() == 3);  // one mapping per process arena
  CHECK(Eventually([&] { return StatusDevices(daemon, "gjob") == gpu_of; }));

  for (int step = 0; step < 3; ++step) {
    for (int r = 0; r < 3; ++r) {
      procs[r]->Submit<float>(0, {1.0f * (r + 1) + step, 10.0f * (r + 1)}, 0);
      procs[r]->Submit<int32_t>(256, {r * 7 - 5 + step}, 1);
      procs[r]->Submit<float>(1024, {3.0f * r, 6.0f, 9.0f}, 2);
      clients[r]->Submit(10 * step + 1, "a", wire::DataType::kFloat32, wire::ReduceOp::kSum, 2, 0,
                         0);
      clients[r]->Submit(10 * step + 2, "b", wire::DataType::kInt32, wire::ReduceOp::kMax, 1, 256,
                         1);
      clients[r]->Submit(10 * step + 3, "c", wire::DataType::kFloat32, wire::ReduceOp::kAverage, 3,
                         1024, 2);
    }
    for (int r = 0; r < 3; ++r) {
      for (int k = 1; k <= 3; ++k) {
        Reply done = clients[r]->Expect(wire::MsgType::kComplete);
        INFO(done.message);
        REQUIRE(done.code == 0);
        CHECK(done.request_id == static_cast<uint64_t>(10 * step + k));
        CHECK(done.shape.size() == 1);
      }
      CHECK(procs[r]->Result<float>(0, 2, 0) == std::vector<float>{6.0f + 3 * step, 60.0f});
      CHECK(procs[r]->Result<int32_t>(256, 1, 1) == std::vector<int32_t>{9 + step});
      CHECK(procs[r]->Result<float>(1024, 3, 2) == std::vector<float>{3.0f, 6.0f, 9.0f});
    }
  }
  CHECK(device.memory_opens() == 3);  // cached: opened once, not per collective

  // Bad input from one process is that process's error: an event index outside its pool.
  procs[1]->Submit<float>(0, {1.0f}, 0);
  clients[1]->Submit(99, "bad", wire::DataType::kFloat32, wire::ReduceOp::kSum, 1, 0, 9);
  Reply bad = clients[1]->Expect(wire::MsgType::kComplete);
  CHECK(bad.code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  CHECK_THAT(bad.message, Catch::Contains("event"));

  clients.clear();  // every process leaves: the daemon closes their IPC mappings
  CHECK(Eventually([&] { return device.open_mappings() == 0; }));
  daemon.Shutdown();
}

TEST_CASE("GPU path: bad registrations are refused to that process only") {
  TempDir dir;
  HostWorld world;
  HostDevice device(world, "h", 1, 1);
  Daemon daemon(Config(dir), &device);
  REQUIRE(daemon.Start().ok());
  const std::string sock = dir.path() + "/h.sock";
  FakeProcess p0(world, "h", 100, 1, 0, 0), p1(world, "h", 101, 1, 0, 1);
  WireClient c0(sock, "bad", 0, 2), c1(sock, "bad", 1, 2);
  c0.Expect(wire::MsgType::kWelcome);
  c1.Expect(wire::MsgType::kWelcome);

  // A GPU the daemon does not have.
  gpu::GpuRegistration wrong = p1.Registration();
  wrong.device = 3;
  c1.Register(wrong, 1);
  Reply r1 = c1.Next();
  CHECK(r1.type == wire::MsgType::kError);
  CHECK(r1.request_id == 1);
  CHECK_THAT(r1.message, Catch::Contains("GPU 3 does not exist"));
  // A stale handle: memory the process already freed.
  gpu::GpuRegistration stale = p1.Registration();
  p1.FreeArena();
  c1.Register(stale, 2);
  Reply r2 = c1.Next();
  CHECK(r2.type == wire::MsgType::kError);
  CHECK(r2.code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));

  // GPU_SUBMIT before every rank registered.
  c0.Register(p0.Registration(), 3);
  c0.Submit(4, "early", wire::DataType::kFloat32, wire::ReduceOp::kSum, 1, 0, 0);
  Reply early = c0.Expect(wire::MsgType::kComplete);
  CHECK(early.code == static_cast<int32_t>(absl::StatusCode::kFailedPrecondition));
  CHECK_THAT(early.message, Catch::Contains("registered its GPU"));
  daemon.Shutdown();
}

TEST_CASE_METHOD(
    OneDaemon,
    "GPU path: a process hanging up mid-job fails the job and its IPC handles are closed") {
  FakeProcess p0(world, "h", 100, 2, 0, 0), p1(world, "h", 101, 2, 1, 1);
  auto c0 = std::make_unique<WireClient>(sock, "hang", 0, 2);
  auto c1 = std::make_unique<WireClient>(sock, "hang", 1, 2);
  c0->Expect(wire::MsgType::kWelcome);
  c1->Expect(wire::MsgType::kWelcome);
  c0->Register(p0.Registration(), 1);
  c1->Register(p1.Registration(), 1);
  REQUIRE(c0->Next().type == wire::MsgType::kGpuRegistered);
  REQUIRE(c1->Next().type == wire::MsgType::kGpuRegistered);
  CHECK(device.open_mappings() == 2);
  // One allreduce works.
  p0.Submit<float>(0, {1.0f, 2.0f}, 0);
  p1.Submit<float>(0, {10.0f, 20.0f}, 0);
  c0->Submit(4, "w", wire::DataType::kFloat32, wire::ReduceOp::kSum, 2, 0, 0);
  c1->Submit(4, "w", wire::DataType::kFloat32, wire::ReduceOp::kSum, 2, 0, 0);
  REQUIRE(c0->Expect(wire::MsgType::kComplete).code == 0);
  REQUIRE(c1->Expect(wire::MsgType::kComplete).code == 0);
  CHECK(p1.Result<float>(0, 2, 0) == std::vector<float>{11.0f, 22.0f});

  // Rank 0 submits; rank 1 hangs up before submitting its part.
  p0.Submit<float>(0, {1.0f, 2.0f}, 0);
  c0->Submit(5, "t", wire::DataType::kFloat32, wire::ReduceOp::kSum, 2, 0, 0);
  c1->HangUp();
  Reply done = c0->Expect(wire::MsgType::kComplete);
  CHECK(done.request_id == 5);
  CHECK(done.code == static_cast<int32_t>(absl::StatusCode::kAborted));
  CHECK_THAT(done.message, Catch::Contains("rank 1"));
  // The job is over for rank 0 too: its next submit gets the failure.
  c0->Submit(6, "u", wire::DataType::kFloat32, wire::ReduceOp::kSum, 2, 0, 0);
  CHECK(c0->Expect(wire::MsgType::kComplete).code ==
        static_cast<int32_t>(absl::StatusCode::kAborted));
  // Both simulated processes share this test's pid: the mappings close with the last of them.
  c0.reset();
  CHECK(Eventually([&] { return device.open_mappings() == 0; }));
  daemon.Shutdown();
}

TEST_CASE_METHOD(
    OneDaemon, "GPU broadcast, allgather, reducescatter and scaled allreduce through the daemon") {
  std::vector<std::unique_ptr<FakeProcess>> procs;
  std::vector<std::unique_ptr<WireClient>> clients;
  const std::vector<int> gpu_of = {0, 1, 0};  // ranks 0 and 2 share GPU 0
  for (int r = 0; r < 3; ++r) {
    procs.push_back(std::make_unique<FakeProcess>(world, "h", 100 + r, 2, gpu_of[r], r));
    clients.push_back(std::make_unique<WireClient>(sock, "coll", r, 3));
  }
  for (auto& c : clients) c->Expect(wire::MsgType::kWelcome);
  for (int r = 0; r < 3; ++r) clients[r]->Register(procs[r]->Registration(), 1);
  for (auto& c : clients) REQUIRE(c->Next().type == wire::MsgType::kGpuRegistered);
  using wire::Collective;
  using wire::DataType;

  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    // Broadcast from rank 1 of a [2, 2] int32 tensor.
    wire::Submit bcast = Meta(Collective::kBroadcast, "bcast", DataType::kInt32, {2, 2});
    bcast.root_rank = 1;
    // Allgather of [1, 2] float16 (as raw halves) per rank: the result is [3, 2].
    wire::Submit gather = Meta(Collective::kAllgather, "gather", DataType::kFloat16, {1, 2});
    // Reducescatter of [5] float: blocks of 2, 2, 1 rows; average, prescale 2, postscale 10.
    wire::Submit scatter = Meta(Collective::kReducescatter, "scatter", DataType::kFloat32, {5});
    scatter.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kAverage);
    scatter.prescale = 2;
    scatter.postscale = 10;
    // Allreduce of [2] float64 with prescale 0.5, postscale 4.
    wire::Submit scaled = Meta(Collective::kAllreduce, "scaled", DataType::kFloat64, {2});
    scaled.prescale = 0.5;
    scaled.postscale = 4;
    for (int r = 0; r < 3; ++r) {
      procs[r]->Submit<int32_t>(0, {r, r + step, -r, 100 * r}, 0);
      procs[r]->Submit<uint16_t>(256, {uint16_t(r + 1), uint16_t(0x3c00 + r)}, 1);
      procs[r]->Submit<float>(1024, {1.0f + r, 2, 3, 4, 5.0f * r}, 2);
      procs[r]->Submit<double>(2048, {1.0 + r + step, -2}, 3);
      clients[r]->SubmitMeta(1, bcast, 0, 0);
      clients[r]->SubmitMeta(2, gather, 256, 1);
      clients[r]->SubmitMeta(3, scatter, 1024, 2);
      clients[r]->SubmitMeta(4, scaled, 2048, 3);
    }
    const std::vector<std::vector<int64_t>> scatter_shapes = {{2}, {2}, {1}};
    for (int r = 0; r < 3; ++r) {
      std::vector<std::vector<int64_t>> shapes(5);
      for (int k = 0; k < 4; ++k) {
        Reply done = clients[r]->Expect(wire::MsgType::kComplete);
        INFO(done.message);
        REQUIRE(done.code == 0);
        shapes[done.request_id] = done.shape;
      }
      CHECK(shapes[1] == std::vector<int64_t>{2, 2});
      CHECK(shapes[2] == std::vector<int64_t>{3, 2});
      CHECK(shapes[3] == scatter_shapes[r]);
      CHECK(shapes[4] == std::vector<int64_t>{2});
      CHECK(procs[r]->Result<int32_t>(0, 4, 0) == std::vector<int32_t>{1, 1 + step, -1, 100});
      CHECK(procs[r]->Result<uint16_t>(256, 6, 1) ==
            std::vector<uint16_t>{1, 0x3c00, 2, 0x3c01, 3, 0x3c02});
      // Sum of inputs x 2 / 3 x 10: {1+2+3, 6, 9, 12, 0+5+10} * 20 / 3.
      const std::vector<std::vector<float>> block = {{40, 40}, {60, 80}, {100}};
      CHECK(procs[r]->Result<float>(1024, block[r].size(), 2) == block[r]);
      CHECK(procs[r]->Result<double>(2048, 2, 3) == std::vector<double>{(6.0 + 3 * step) * 2, -12});
    }
  }

  // Bad input is that process's error: a broadcast root outside the job, an allgather whose
  // result (3 x input) would run past its staging arena.
  wire::Submit root = Meta(Collective::kBroadcast, "root", DataType::kFloat32, {1});
  root.root_rank = 3;
  clients[2]->SubmitMeta(5, root, 0, 0);
  Reply bad_root = clients[2]->Expect(wire::MsgType::kComplete);
  CHECK(bad_root.code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  CHECK_THAT(bad_root.message, Catch::Contains("root rank 3"));
  wire::Submit big = Meta(Collective::kAllgather, "big", DataType::kFloat32, {1024});
  clients[0]->SubmitMeta(6, big, (1 << 16) - 8192, 0);  // input fits, 3 x input does not
  Reply bad_range = clients[0]->Expect(wire::MsgType::kComplete);
  CHECK(bad_range.code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  CHECK_THAT(bad_range.message, Catch::Contains("staging arena"));

  // Unequal first dimensions of a device allgather: that tensor fails on every rank (the
  // mismatch is between ranks), the job goes on.
  for (int r = 0; r < 3; ++r) {
    clients[r]->SubmitMeta(
        7, Meta(Collective::kAllgather, "uneven", DataType::kFloat32, {r == 2 ? 2 : 1}), 0, 0);
  }
  for (int r = 0; r < 3; ++r) {
    Reply uneven = clients[r]->Expect(wire::MsgType::kComplete);
    CHECK(uneven.request_id == 7);
    CHECK(uneven.code == static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
    CHECK_THAT(uneven.message, Catch::Contains("first dimension must be equal"));
  }
  for (int r = 0; r < 3; ++r) {
    procs[r]->Submit<float>(0, {1.0f + r}, 0);
    clients[r]->Submit(8, "after", DataType::kFloat32, wire::ReduceOp::kSum, 1, 0, 0);
  }
  for (int r = 0; r < 3; ++r) {
    Reply after = clients[r]->Expect(wire::MsgType::kComplete);
    INFO(after.message);
    CHECK(after.code == 0);
    CHECK(procs[r]->Result<float>(0, 1, 0) == std::vector<float>{6});
  }
  clients.clear();
  CHECK(Eventually([&] { return device.open_mappings() == 0; }));
  daemon.Shutdown();
}

// Two daemons ("hosts" a and b; real gRPC negotiation and TCP data plane on loopback), each on
// its own device double in one simulated cluster: a has GPUs 0 and 1, b has GPU 0, and b runs with
// gpu_mode `b_mode` ("hierarchical" there makes every host of a job hierarchical).
struct TwoDaemons {
  explicit TwoDaemons(const std::string& b_mode) {
    DaemonConfig ca = Config(dir);
    ca.set_host_name("a");
    ca.set_local_socket(socket("a"));
    a = std::make_unique<Daemon>(ca, &device_a);
    REQUIRE(a->Start().ok());
    DaemonConfig cb = Config(dir);
    cb.set_host_name("b");
    cb.set_local_socket(socket("b"));
    cb.set_coordinator("127.0.0.1:" + std::to_string(a->port()));
    cb.set_gpu_mode(b_mode);
    b = std::make_unique<Daemon>(cb, &device_b);
    REQUIRE(b->Start().ok());
    REQUIRE(Eventually([&] { return UpHosts(*a) == 2; }));  // b joined: its jobs can register
  }
  ~TwoDaemons() {
    b->Shutdown();
    a->Shutdown();
  }
  std::string socket(const std::string& host) const { return dir.path() + "/" + host + ".sock"; }

  TempDir dir;
  HostWorld world;
  HostDevice device_a{world, "a", 1, 2};
  HostDevice device_b{world, "b", 2, 1};
  std::unique_ptr<Daemon> a, b;
};

// Two daemons ("hosts" a and b, real gRPC negotiation and TCP data plane on loopback), each on
// its own device double in one simulated cluster: ranks 0 and 1 on a's GPUs 0 and 1, rank 2 on b's
// GPU 0. The GPUs register after the job formed; the coordinator's second round gives both hosts
// the same plan. "auto": one communicator spans the three GPUs (same NCCL on both hosts).
// "hierarchical" on host b alone: both hosts run hierarchical (a communicator per host, the TCP
// mesh between them, on the data-plane executor in the committed order with CPU tensors).
TEST_CASE("GPU allreduce across two daemons, NCCL-spanning and hierarchical") {
  const std::string b_mode = GENERATE(std::string("auto"), std::string("hierarchical"));
  INFO("host b gpu_mode=" << b_mode);
  TwoDaemons hosts(b_mode);

  struct Rank {
    std::string host;
    int device, local_rank, local_size;
  };
  const std::vector<Rank> ranks = {{"a", 0, 0, 2}, {"a", 1, 1, 2}, {"b", 0, 0, 1}};
  std::vector<std::unique_ptr<FakeProcess>> procs;
  std::vector<std::unique_ptr<WireClient>> clients;
  for (int r = 0; r < 3; ++r) {
    const Rank& k = ranks[r];
    procs.push_back(std::make_unique<FakeProcess>(hosts.world, k.host, 100 + r,
                                                  k.host == "a" ? 2 : 1, k.device, r));
    clients.push_back(std::make_unique<WireClient>(hosts.socket(k.host), "xjob", r, 3, k.local_rank,
                                                   k.local_size));
  }
  for (auto& c : clients) c->Expect(wire::MsgType::kWelcome);
  for (int r = 0; r < 3; ++r) clients[r]->Register(procs[r]->Registration(), 5);
  for (auto& c : clients) {
    Reply reg = c->Next();
    INFO(reg.message);
    REQUIRE(reg.type == wire::MsgType::kGpuRegistered);
  }
  CHECK(Eventually([&] { return StatusDevices(*hosts.a, "xjob", "a") == std::vector<int>{0, 1}; }));
  CHECK(Eventually([&] { return StatusDevices(*hosts.b, "xjob", "b") == std::vector<int>{0}; }));
  CHECK_THAT(StatusGpuPlan(*hosts.a, "xjob"),
             Catch::StartsWith(b_mode == "auto" ? "nccl: 3 communicator ranks"
                                                : "hierarchical: 2 communicator ranks"));

  for (int step = 0; step < 3; ++step) {
    for (int r = 0; r < 3; ++r) {
      procs[r]->Submit<float>(0, {1.0f + r + step, -2.0f * r}, 0);
      procs[r]->Submit<int32_t>(256, {10 * r + step, 7 - r}, 1);
      procs[r]->Submit<double>(512, {3.0 * r}, 2);
      clients[r]->Submit(10 * step + 1, "f", wire::DataType::kFloat32, wire::ReduceOp::kSum, 2, 0,
                         0);
      clients[r]->Submit(10 * step + 2, "i", wire::DataType::kInt32, wire::ReduceOp::kMin, 2, 256,
                         1);
      clients[r]->Submit(10 * step + 3, "d", wire::DataType::kFloat64, wire::ReduceOp::kAverage, 1,
                         512, 2);
      // A host tensor of the same job, between the GPU ones: its data plane shares the job's one
      // committed order (and TCP mesh) with the GPU responses.
      clients[r]->SubmitHost(10 * step + 4, "h", {1.0f * r + step, 1.0f});
    }
    for (int r = 0; r < 3; ++r) {
      std::set<uint64_t> completed;
      for (int k = 1; k <= 4; ++k) {
        Reply done = clients[r]->Expect(wire::MsgType::kComplete);
        INFO("rank " << r << ": " << done.message);
        REQUIRE(done.code == 0);
        completed.insert(done.request_id);
        if (done.request_id == static_cast<uint64_t>(10 * step + 4)) {
          CHECK(clients[r]->HostResult(done, 2) == std::vector<float>{3.0f + 3 * step, 3.0f});
        }
      }
      CHECK(completed.size() == 4);
      CHECK(procs[r]->Result<float>(0, 2, 0) == std::vector<float>{6.0f + 3 * step, -6.0f});
      CHECK(procs[r]->Result<int32_t>(256, 2, 1) == std::vector<int32_t>{step, 5});
      CHECK(procs[r]->Result<double>(512, 1, 2) == std::vector<double>{3.0});
    }
  }

  // b's only rank hangs up; a's ranks then submit a tensor that needs it: both get the failure,
  // naming it, instead of hanging in a communicator.
  clients[2]->HangUp();
  for (int r = 0; r < 2; ++r) {
    procs[r]->Submit<float>(0, {1.0f, 1.0f}, 0);
    clients[r]->Submit(100, "f", wire::DataType::kFloat32, wire::ReduceOp::kSum, 2, 0, 0);
  }
  for (int r = 0; r < 2; ++r) {
    Reply failed = clients[r]->Expect(wire::MsgType::kComplete);
    CHECK(failed.code != 0);
    CHECK_THAT(failed.message, Catch::Contains("2 on b"));
  }
  clients.clear();
  CHECK(Eventually(
      [&] { return hosts.device_a.open_mappings() == 0 && hosts.device_b.open_mappings() == 0; }));
}

// The other collectives across the same two daemons (ranks 0, 1 on a's GPUs 0, 1; rank 2 on b's
// GPU 0), in both plans: one communicator spanning the hosts, and hierarchical (host buffers
// summed over the TCP mesh).
TEST_CASE(
    "GPU broadcast, allgather, reducescatter across two daemons, NCCL-spanning and "
    "hierarchical") {
  const std::string b_mode = GENERATE(std::string("auto"), std::string("hierarchical"));
  INFO("host b gpu_mode=" << b_mode);
  TwoDaemons hosts(b_mode);
  const std::vector<std::string> host = {"a", "a", "b"};
  std::vector<std::unique_ptr<FakeProcess>> procs;
  std::vector<std::unique_ptr<WireClient>> clients;
  for (int r = 0; r < 3; ++r) {
    const bool on_a = host[r] == "a";
    procs.push_back(std::make_unique<FakeProcess>(hosts.world, host[r], 100 + r, on_a ? 2 : 1,
                                                  on_a ? r : 0, r));
    clients.push_back(std::make_unique<WireClient>(hosts.socket(host[r]), "xcoll", r, 3,
                                                   on_a ? r : 0, on_a ? 2 : 1));
  }
  for (auto& c : clients) c->Expect(wire::MsgType::kWelcome);
  for (int r = 0; r < 3; ++r) clients[r]->Register(procs[r]->Registration(), 5);
  for (auto& c : clients) REQUIRE(c->Next().type == wire::MsgType::kGpuRegistered);
  using wire::Collective;
  using wire::DataType;
  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    wire::Submit bcast = Meta(Collective::kBroadcast, "bcast", DataType::kInt64, {2});
    bcast.root_rank = 2;  // on host b
    wire::Submit gather = Meta(Collective::kAllgather, "gather", DataType::kInt32, {1, 2});
    wire::Submit scatter = Meta(Collective::kReducescatter, "scatter", DataType::kFloat32, {4});
    scatter.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kAverage);
    scatter.prescale = 3;
    scatter.postscale = 2;
    for (int r = 0; r < 3; ++r) {
      procs[r]->Submit<int64_t>(0, {100 * r + step, -r}, 0);
      procs[r]->Submit<int32_t>(256, {r, 10 * r + step}, 1);
      procs[r]->Submit<float>(512, {1.0f * r, 2, 3, 4.0f + step}, 2);
      clients[r]->SubmitMeta(1, bcast, 0, 0);
      clients[r]->SubmitMeta(2, gather, 256, 1);
      clients[r]->SubmitMeta(3, scatter, 512, 2);
    }
    // Reducescatter of 4 rows over 3 ranks: blocks of 2, 1, 1; the average of the inputs x 3 x 2.
    const std::vector<std::vector<float>> block = {{6, 12}, {18}, {6.0f * (4 + step)}};
    for (int r = 0; r < 3; ++r) {
      std::vector<std::vector<int64_t>> shapes(4);
      for (int k = 0; k < 3; ++k) {
        Reply done = clients[r]->Expect(wire::MsgType::kComplete);
        INFO("rank " << r << ": " << done.message);
        REQUIRE(done.code == 0);
        shapes[done.request_id] = done.shape;
      }
      CHECK(shapes[1] == std::vector<int64_t>{2});
      CHECK(shapes[2] == std::vector<int64_t>{3, 2});
      CHECK(shapes[3] == std::vector<int64_t>{r == 0 ? 2 : 1});
      CHECK(procs[r]->Result<int64_t>(0, 2, 0) == std::vector<int64_t>{200 + step, -2});
      CHECK(procs[r]->Result<int32_t>(256, 6, 1) ==
            std::vector<int32_t>{0, step, 1, 10 + step, 2, 20 + step});
      CHECK(procs[r]->Result<float>(512, block[r].size(), 2) == block[r]);
    }
  }
  clients.clear();
  CHECK(Eventually(
      [&] { return hosts.device_a.open_mappings() == 0 && hosts.device_b.open_mappings() == 0; }));
}

}  // namespace
}  // namespace ard
