#include "daemon/jobs/job_test_util.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/synchronization/notification.h"
#include "catch2/catch.hpp"
#include "daemon/jobs/local_negotiator.h"
#include "daemon/local/seqpacket.h"

namespace ard::jobs {

TestClient::TestClient(pid_t pid, uint64_t arena_bytes) : pid_(pid), input_bytes_(arena_bytes) {
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0);
  fd_ = fds[1];
  session_ = std::make_shared<local::Session>(
      fds[0], local::PeerCredentials{pid, getuid(), getgid()}, 1 << 20, [] {});
  const int memfd = memfd_create("job-test-input", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(memfd >= 0);
  REQUIRE(ftruncate(memfd, arena_bytes) == 0);
  REQUIRE(fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  void* input = mmap(nullptr, arena_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  REQUIRE(input != MAP_FAILED);
  input_ = static_cast<uint8_t*>(input);
  // HELLO's segment, as JobRegistry::HandleHello maps it (the arena takes the descriptor).
  REQUIRE(session_->input.AddSegment(0, memfd, arena_bytes).ok());
}

TestClient::~TestClient() {
  if (fd_ >= 0) close(fd_);
  munmap(input_, input_bytes_);
  for (const auto& [index, fd] : result_fds_) close(fd);
}

ClientFrame TestClient::Next(absl::Duration timeout) {
  INFO("waiting for a frame from the daemon to pid " << pid_);
  pollfd p{fd_, POLLIN, 0};
  REQUIRE(poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 1);
  auto m = local::RecvMessage(fd_, wire::kMaxFrameBytes);
  REQUIRE(m.ok());
  ClientFrame f;
  wire::FrameHeader h;
  REQUIRE(m->bytes.size() >= sizeof(h));
  memcpy(&h, m->bytes.data(), sizeof(h));
  REQUIRE(h.magic == wire::kMagic);
  REQUIRE(h.payload_bytes == m->bytes.size() - sizeof(h));
  f.type = static_cast<wire::MsgType>(h.type);
  f.request_id = h.request_id;
  f.had_fd = m->fd >= 0;
  const char* payload = m->bytes.data() + sizeof(h);
  switch (f.type) {
    case wire::MsgType::kWelcome:
      REQUIRE(h.payload_bytes == sizeof(f.welcome));
      memcpy(&f.welcome, payload, sizeof(f.welcome));
      REQUIRE(f.had_fd);
      result_fds_[0] = m->fd;
      return f;
    case wire::MsgType::kResultSegment:
      REQUIRE(h.payload_bytes == sizeof(f.segment));
      memcpy(&f.segment, payload, sizeof(f.segment));
      REQUIRE(f.had_fd);
      result_fds_[f.segment.index] = m->fd;
      return f;
    case wire::MsgType::kComplete: {
      REQUIRE(h.payload_bytes >= sizeof(f.complete));
      memcpy(&f.complete, payload, sizeof(f.complete));
      f.code = f.complete.code;
      const size_t splits = f.complete.num_splits * sizeof(int64_t);
      REQUIRE(h.payload_bytes == sizeof(f.complete) + splits + f.complete.message_bytes);
      f.message.assign(payload + sizeof(f.complete) + splits, f.complete.message_bytes);
      break;
    }
    case wire::MsgType::kError:
    case wire::MsgType::kNotify: {
      wire::Error e;
      REQUIRE(h.payload_bytes >= sizeof(e));
      memcpy(&e, payload, sizeof(e));
      REQUIRE(h.payload_bytes == sizeof(e) + e.message_bytes);
      f.code = e.code;
      f.message.assign(payload + sizeof(e), e.message_bytes);
      break;
    }
    default:
      break;
  }
  if (m->fd >= 0) close(m->fd);
  return f;
}

bool TestClient::Quiet() {
  pollfd p{fd_, POLLIN, 0};
  return poll(&p, 1, 0) == 0;
}

void TestClient::WriteInput(uint64_t offset, const void* data, size_t bytes) {
  REQUIRE(offset + bytes <= input_bytes_);
  memcpy(input_ + offset, data, bytes);
}

local::DecodedFrame TestClient::SendSubmit(uint64_t request_id, const wire::Submit& submit) {
  wire::FrameHeader h{};
  h.magic = wire::kMagic;
  h.version = wire::kVersion;
  h.type = static_cast<uint16_t>(wire::MsgType::kSubmit);
  h.payload_bytes = sizeof(submit);
  h.request_id = request_id;
  std::string bytes(sizeof(h) + sizeof(submit), '\0');
  memcpy(bytes.data(), &h, sizeof(h));
  memcpy(bytes.data() + sizeof(h), &submit, sizeof(submit));
  REQUIRE(local::SendMessage(fd_, bytes, -1));
  auto m = local::RecvMessage(session_->fd(), wire::kMaxFrameBytes);
  REQUIRE(m.ok());
  REQUIRE(m->fd < 0);
  auto frame = local::DecodeFrame(reinterpret_cast<const uint8_t*>(m->bytes.data()),
                                  m->bytes.size(), /*has_fd=*/false);
  REQUIRE(frame.ok());
  return *std::move(frame);
}

std::string TestClient::ReadResult(uint32_t segment, uint64_t offset, uint64_t bytes) {
  REQUIRE(result_fds_.count(segment) == 1);
  void* m = mmap(nullptr, offset + bytes, PROT_READ, MAP_SHARED, result_fds_[segment], 0);
  REQUIRE(m != MAP_FAILED);
  std::string out(static_cast<const char*>(m) + offset, bytes);
  munmap(m, offset + bytes);
  return out;
}

void TestClient::Exit() {
  close(fd_);
  fd_ = -1;
}

wire::Submit MakeSubmit(const std::string& name, wire::Collective collective, wire::DataType dtype,
                        const std::vector<int64_t>& shape, uint64_t offset) {
  wire::Submit s{};
  s.collective = static_cast<uint32_t>(collective);
  s.dtype = static_cast<uint32_t>(dtype);
  s.reduce_op = static_cast<uint32_t>(wire::ReduceOp::kSum);
  s.prescale = 1.0;
  s.postscale = 1.0;
  REQUIRE(name.size() < sizeof(s.name));
  memcpy(s.name, name.data(), name.size());
  s.ndims = static_cast<uint32_t>(shape.size());
  uint64_t elements = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    s.shape[d] = shape[d];
    elements *= shape[d];
  }
  const bool tensorless =
      collective == wire::Collective::kBarrier || collective == wire::Collective::kJoin;
  s.bytes = tensorless ? 0 : elements * wire::DataTypeSize(s.dtype);
  s.offset = offset;
  s.group_id = -1;
  return s;
}

wire::Submit FloatSum(const std::string& name, int64_t n, uint64_t offset) {
  return MakeSubmit(name, wire::Collective::kAllreduce, wire::DataType::kFloat32, {n}, offset);
}

wire::Submit Barrier(const std::string& name) {
  return MakeSubmit(name, wire::Collective::kBarrier, wire::DataType::kUint8, {});
}

wire::Submit Join() {
  return MakeSubmit("join", wire::Collective::kJoin, wire::DataType::kUint8, {});
}

Formation OneHostFormation(const std::vector<int>& ranks, const std::string& host) {
  const int size = static_cast<int>(ranks.size());
  Formation f;
  f.ranks = ranks;
  f.local_ranks = ranks;
  f.local_size = size;
  f.hosts.size = size;
  f.hosts.host_of_rank.assign(size, 0);
  f.hosts.ranks_of_host.resize(1);
  for (int r = 0; r < size; ++r) f.hosts.ranks_of_host[0].push_back(r);
  f.hosts.host_names = {host};
  return f;
}

JobOptions TestJobOptions() {
  JobOptions o;
  o.host_name = "h-test";
  o.form_timeout = absl::Seconds(5);
  o.stall_warning = absl::Seconds(1);
  o.result_segment_bytes = 1 << 20;
  o.max_result_bytes = 4 << 20;
  return o;
}

JobHarness::JobHarness(int size, bool local_negotiator, JobOptions options, int elastic_max_np)
    : options_(std::move(options)), size_(size) {
  std::unique_ptr<Negotiator> negotiator;
  if (local_negotiator) {
    negotiator = std::make_unique<LocalNegotiator>(options_, size, elastic_max_np);
  } else {
    auto fake = std::make_unique<FakeNegotiator>();
    fake_ = fake.get();
    negotiator = std::move(fake);
  }
  job_ =
      std::make_unique<Job>(JobEnvironment{loop_, options_, nullptr, nullptr}, kJobId, kJobName,
                            size, size, getuid(), std::move(negotiator), [this] { finished_++; });
  loop_.Start();
}

JobHarness::~JobHarness() {
  OnLoop([this] { job_.reset(); });  // stops its executor on the loop, as the registry does
  loop_.Stop();
}

void JobHarness::OnLoop(const std::function<void()>& task) {
  absl::Notification done;
  loop_.Post([&] {
    task();
    done.Notify();
  });
  REQUIRE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

FakeNegotiator& JobHarness::negotiator() {
  REQUIRE(fake_ != nullptr);
  return *fake_;
}

int JobHarness::finished() {
  OnLoop([] {});
  return finished_.load();
}

JobState JobHarness::state() {
  JobState s;
  OnLoop([&] { s = job_->state(); });
  return s;
}

JobSummary JobHarness::Summary() {
  JobSummary s;
  OnLoop([&] { s = job_->Summary(absl::Now()); });
  return s;
}

TestClient& JobHarness::Add(int rank, int local_rank, uint64_t arena_bytes) {
  auto client =
      std::make_unique<TestClient>(1000 + static_cast<pid_t>(clients_.size()), arena_bytes);
  std::shared_ptr<local::Session> s = client->session();
  clients_.push_back(std::move(client));
  OnLoop([&] {
    s->job = kJobName;
    s->rank = rank;
    s->local_rank = local_rank;
    job_->AddMember(s);
  });
  return *clients_.back();
}

void JobHarness::Close(TestClient& c, bool graceful, const std::string& why) {
  OnLoop([&] {
    c.session()->Close();
    job_->OnMemberClosed(c.session(), graceful, why);
  });
}

void JobHarness::Submit(TestClient& c, uint64_t request_id, const wire::Submit& submit) {
  local::DecodedFrame frame = c.SendSubmit(request_id, submit);
  OnLoop([&] { job_->Submit(c.session(), std::move(frame)); });
}

void JobHarness::FormInOrder() {
  for (int i = 0; i < size_; ++i) Add();
  if (fake_ != nullptr) {
    REQUIRE(fake_->form_done.size() == 1);
    std::vector<int> ranks;
    for (int i = 0; i < size_; ++i) ranks.push_back(i);
    OnLoop([&] { fake_->CompleteForm(0, OneHostFormation(ranks, options_.host_name)); });
  }
  for (int i = 0; i < size_; ++i) REQUIRE(client(i).Next().type == wire::MsgType::kWelcome);
}

std::string Expect(TestClient& c, wire::MsgType type, absl::StatusCode code,
                   uint64_t request_id) {
  ClientFrame f = c.Next();
  REQUIRE(f.type == type);
  CHECK(f.code == static_cast<int32_t>(code));
  CHECK(f.request_id == request_id);
  return f.message;
}

}  // namespace ard::jobs
