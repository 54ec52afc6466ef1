#include "daemon/gpu_wire_client.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "catch2/catch.hpp"
#include "daemon/local/seqpacket.h"

namespace ard::testing {
namespace {

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

}  // namespace

WireClient::WireClient(const std::string& socket_path, const std::string& job, int rank, int size,
                       int local_rank, int local_size) {
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
  input_ = static_cast<char*>(mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0));
  REQUIRE(input_ != MAP_FAILED);
  close(memfd);
}

WireClient::~WireClient() {
  HangUp();
  munmap(input_, 1 << 16);
  if (results_ != nullptr) munmap(const_cast<char*>(results_), results_bytes_);
}

void WireClient::HangUp() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Reply WireClient::Next() {
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

Reply WireClient::Expect(wire::MsgType type) {
  for (int i = 0; i < 16; ++i) {
    Reply r = Next();
    if (r.type == type) return r;
    INFO("skipped frame type " << static_cast<int>(r.type) << ": " << r.message);
  }
  FAIL("no frame of the expected type");
  return {};
}

void WireClient::Register(const gpu::GpuRegistration& reg, uint64_t request_id) {
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

void WireClient::Unregister(uint64_t request_id) {
  REQUIRE(local::SendMessage(fd_, Frame(wire::MsgType::kGpuUnregister, request_id, nullptr, 0, ""),
                             -1));
}

void WireClient::SubmitMeta(uint64_t request_id, const wire::Submit& s, uint64_t offset,
                            uint32_t event) {
  wire::GpuPlacement p{offset, event, 0};
  std::string tail(reinterpret_cast<const char*>(&p), sizeof(p));
  REQUIRE(local::SendMessage(fd_, Frame(wire::MsgType::kGpuSubmit, request_id, &s, sizeof(s), tail),
                             -1));
}

void WireClient::SubmitHost(uint64_t request_id, const std::string& name,
                            const std::vector<float>& values) {
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

std::vector<float> WireClient::HostResult(const Reply& done, size_t count) const {
  REQUIRE(results_ != nullptr);
  REQUIRE(done.offset + count * sizeof(float) <= results_bytes_);
  std::vector<float> out(count);
  std::memcpy(out.data(), results_ + done.offset, count * sizeof(float));
  return out;
}

void WireClient::Submit(uint64_t request_id, const std::string& name, wire::DataType dtype,
                        wire::ReduceOp op, int64_t count, uint64_t offset, uint32_t event) {
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
  REQUIRE(local::SendMessage(fd_, Frame(wire::MsgType::kGpuSubmit, request_id, &s, sizeof(s), tail),
                             -1));
}

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

}  // namespace ard::testing
