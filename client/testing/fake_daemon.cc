#include "client/testing/fake_daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "client/testing/fake_result_arena.h"
#include "client/testing/fake_socket.h"

namespace ard::client::testing {
namespace {

using wire::MsgType;

}  // namespace

struct FakeDaemon::Impl {
  FakeDaemonOptions options;
  std::string dir, path;
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::mutex mu;
  std::condition_variable cv;
  FakeDaemonState state;
  std::vector<std::unique_ptr<FakeConn>> conns;
  FakeResultArena results;
  std::map<uint64_t, FakeResultArena::Slot> outstanding;  // request id -> result slot
  std::map<uint64_t, std::pair<FakeConn*, ReceivedSubmit>> held;
  struct GpuArena {
    char* base = nullptr;
    uint64_t bytes = 0;
  };
  std::map<FakeConn*, GpuArena> gpu_arenas;
  std::vector<std::pair<FakeConn*, uint64_t>> gpu_unregisters_held;
  bool stop = false;
  std::thread thread;

  void Serve();
  void Accept();
  bool ReadFrames(FakeConn* c);  // false: closed
  void Handle(FakeConn* c, const char* data, size_t n, int fd);
  void HandleHello(FakeConn* c, const wire::FrameHeader& h, const char* p, int fd);
  void HandleAddSegment(FakeConn* c, const wire::FrameHeader& h, const char* p, int fd);
  void HandleSubmit(FakeConn* c, const wire::FrameHeader& h, const char* p);
  void HandleRelease(const wire::FrameHeader& h);
  void HandleGpuRegister(FakeConn* c, const wire::FrameHeader& h, const char* p);
  void HandleGpuSubmit(FakeConn* c, const wire::FrameHeader& h, const char* p);
  void HandleGpuUnregister(FakeConn* c, const wire::FrameHeader& h);
  void Answer(FakeConn* c, const ReceivedSubmit& s);
  void Send(FakeConn* c, std::string frame, int fd = -1) {
    c->Send(std::move(frame), fd);
    Wake();  // the serving thread then polls for POLLOUT if something is left
  }
  void Close(size_t index);
  void Violation(const std::string& what) { state.violations.push_back(what); }
  void Wake() { (void)!::write(wake[1], "x", 1); }
};

FakeDaemon::FakeDaemon(FakeDaemonOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.options = std::move(options);
  char dir[] = "/tmp/ardfdXXXXXX";  // short: sun_path holds 107 bytes
  CheckSys(::mkdtemp(dir) != nullptr, "mkdtemp");
  d.dir = dir;
  d.path = d.dir + "/d.sock";
  d.listen_fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  CheckSys(d.listen_fd >= 0, "socket");
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, d.path.c_str(), sizeof(addr.sun_path) - 1);
  CheckSys(::bind(d.listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0, "bind");
  CheckSys(::listen(d.listen_fd, 16) == 0, "listen");
  CheckSys(::pipe2(d.wake, O_CLOEXEC | O_NONBLOCK) == 0, "pipe2");
  d.results.AddSegment(d.options.result_segment_bytes);
  d.thread = std::thread([&d] { d.Serve(); });
}

FakeDaemon::~FakeDaemon() {
  Impl& d = *impl_;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    d.stop = true;
  }
  d.Wake();
  d.thread.join();
  d.conns.clear();
  ::close(d.listen_fd);
  ::close(d.wake[0]);
  ::close(d.wake[1]);
  ::unlink(d.path.c_str());
  ::rmdir(d.dir.c_str());
}

const std::string& FakeDaemon::socket_path() const { return impl_->path; }

bool FakeDaemon::WaitFor(const std::function<bool(const FakeDaemonState&)>& pred, int timeout_ms) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  return impl_->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                            [&] { return pred(impl_->state); });
}

FakeDaemonState FakeDaemon::State() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->state;
}

void FakeDaemon::Impl::Serve() {
  std::vector<pollfd> fds;
  std::vector<FakeConn*> polled;
  while (true) {
    fds.clear();
    polled.clear();
    {
      std::lock_guard<std::mutex> lock(mu);
      if (stop) return;
      fds.push_back({listen_fd, POLLIN, 0});
      fds.push_back({wake[0], POLLIN, 0});
      for (auto& c : conns) {
        fds.push_back({c->fd, static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
        polled.push_back(c.get());
      }
    }
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    std::lock_guard<std::mutex> lock(mu);
    if (stop) return;
    char drain[64];
    while (::read(wake[0], drain, sizeof(drain)) > 0) {
    }
    for (size_t i = 0; i < polled.size(); ++i) {
      // A command may have closed connections meanwhile: find this one again.
      auto it = std::find_if(conns.begin(), conns.end(), [&](const auto& c) {
        return c.get() == polled[i] && c->fd == fds[i + 2].fd;
      });
      if (it == conns.end()) continue;
      if ((fds[i + 2].revents & (POLLIN | POLLHUP | POLLERR)) && !ReadFrames(it->get())) {
        Close(static_cast<size_t>(it - conns.begin()));
        continue;
      }
      (*it)->Flush();
    }
    if (fds[0].revents & POLLIN) Accept();
    cv.notify_all();
  }
}

void FakeDaemon::Impl::Accept() {
  int fd;
  while ((fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
    conns.push_back(std::make_unique<FakeConn>(fd));
    ++state.connections;
  }
}

bool FakeDaemon::Impl::ReadFrames(FakeConn* c) {
  std::vector<char> buf(wire::kMaxFrameBytes + 1);
  while (true) {
    size_t n = 0;
    int fd = -1;
    bool truncated = false;
    int got = c->Receive(&buf, &n, &fd, &truncated);
    if (got <= 0) return got == 0;
    if (truncated) Violation("truncated frame");
    Handle(c, buf.data(), n, fd);
    if (fd >= 0) ::close(fd);
  }
}

void FakeDaemon::Impl::Handle(FakeConn* c, const char* data, size_t n, int fd) {
  wire::FrameHeader h;
  if (n < sizeof(h)) return Violation("frame shorter than a header");
  std::memcpy(&h, data, sizeof(h));
  if (h.magic != wire::kMagic || h.version != wire::kVersion || h.reserved != 0 ||
      h.payload_bytes != n - sizeof(h)) {
    return Violation("bad frame header");
  }
  state.frames.push_back(h.type);
  const char* p = data + sizeof(h);
  auto type = static_cast<MsgType>(h.type);
  bool wants_fd = type == MsgType::kHello || type == MsgType::kAddSegment;
  if (wants_fd != (fd >= 0)) Violation("fd presence wrong for type " + std::to_string(h.type));
  switch (type) {
    case MsgType::kHello:
      return HandleHello(c, h, p, fd);
    case MsgType::kAddSegment:
      return HandleAddSegment(c, h, p, fd);
    case MsgType::kSubmit:
      return HandleSubmit(c, h, p);
    case MsgType::kRelease:
      return HandleRelease(h);
    case MsgType::kGpuRegister:
      return HandleGpuRegister(c, h, p);
    case MsgType::kGpuSubmit:
      return HandleGpuSubmit(c, h, p);
    case MsgType::kGpuUnregister:
      return HandleGpuUnregister(c, h);
    case MsgType::kBye:
      ++state.byes;
      if (h.payload_bytes != 0) Violation("BYE with a payload");
      return;
    default:
      return Violation("unexpected frame type " + std::to_string(h.type));
  }
}

void FakeDaemon::Impl::HandleHello(FakeConn* c, const wire::FrameHeader& h, const char* p, int fd) {
  wire::Hello hello;
  if (h.payload_bytes != sizeof(hello)) return Violation("HELLO of the wrong length");
  std::memcpy(&hello, p, sizeof(hello));
  ++state.hellos;
  state.hello = hello;
  Mapped m;
  if (MapClientSegment(fd, hello.segment_bytes, &m, &state.violations)) c->inputs.push_back(m);
  using Reply = FakeDaemonOptions::HelloReply;
  if (options.hello_reply == Reply::kError) {
    return Send(c, EncodeErrorFrame(MsgType::kError, 0, options.hello_error_code,
                                    options.hello_error_message));
  }
  if (options.hello_reply == Reply::kSilent) return;
  wire::Welcome w = options.welcome;
  w.result_segment_bytes = results.segment_bytes(0);
  Send(c, EncodeFrame(MsgType::kWelcome, 0, &w, sizeof(w)), ReopenReadOnly(results.fd(0)));
}

void FakeDaemon::Impl::HandleAddSegment(FakeConn* c, const wire::FrameHeader& h, const char* p,
                                        int fd) {
  wire::Segment s;
  if (h.payload_bytes != sizeof(s)) return Violation("ADD_SEGMENT of the wrong length");
  std::memcpy(&s, p, sizeof(s));
  state.added_segments.push_back(s);
  if (s.index != c->inputs.size()) Violation("ADD_SEGMENT index not dense");
  Mapped m;
  if (MapClientSegment(fd, s.bytes, &m, &state.violations)) c->inputs.push_back(m);
}

void FakeDaemon::Impl::HandleSubmit(FakeConn* c, const wire::FrameHeader& h, const char* p) {
  ReceivedSubmit s;
  s.request_id = h.request_id;
  if (h.payload_bytes < sizeof(s.submit)) return Violation("SUBMIT too short");
  std::memcpy(&s.submit, p, sizeof(s.submit));
  size_t tail = h.payload_bytes - sizeof(s.submit);
  if (tail != s.submit.num_splits * sizeof(int64_t)) return Violation("SUBMIT tail length");
  s.splits.resize(s.submit.num_splits);
  if (tail > 0) std::memcpy(s.splits.data(), p + sizeof(s.submit), tail);
  state.submits.push_back(s);
  const wire::Submit& m = s.submit;
  bool in_bounds =
      m.bytes == 0 || (m.segment < c->inputs.size() && m.offset % wire::kSlotAlignment == 0 &&
                       m.offset + m.bytes <= c->inputs[m.segment].bytes);
  if (!in_bounds) {
    Violation("SUBMIT " + std::to_string(h.request_id) + " names an unannounced segment/range");
    return Send(c, EncodeErrorFrame(MsgType::kError, h.request_id,
                                    static_cast<int32_t>(wire::Code::kInvalidArgument),
                                    "bad input location"));
  }
  if (options.hold_submits) {
    state.held.push_back(s.request_id);
    held[s.request_id] = {c, s};
    return;
  }
  Answer(c, s);
}

// float32 allreduce: 2 * input (as if two ranks sent the same tensor); otherwise a copy. `in` and
// `dst` may be the same bytes (the GPU path's result is written in place).
static void FakeResult(const wire::Submit& m, const char* in, char* dst) {
  bool twice = m.collective == static_cast<uint32_t>(wire::Collective::kAllreduce) &&
               m.dtype == static_cast<uint32_t>(wire::DataType::kFloat32);
  for (uint64_t i = 0; twice && i + 4 <= m.bytes; i += 4) {
    float f;
    std::memcpy(&f, in + i, 4);
    f *= 2;
    std::memcpy(dst + i, &f, 4);
  }
  if (!twice) std::memmove(dst, in, m.bytes);
}

void FakeDaemon::Impl::Answer(FakeConn* c, const ReceivedSubmit& s) {
  const wire::Submit& m = s.submit;
  wire::Complete out{};
  out.ndims = m.ndims;
  std::memcpy(out.shape, m.shape, sizeof(out.shape));
  out.join_last_rank = options.welcome.rank;
  out.num_splits = m.num_splits;
  if (m.bytes > 0) {
    FakeResultArena::Slot slot;
    if (!results.Allocate(m.bytes, &slot)) {
      return Send(c, EncodeErrorFrame(MsgType::kError, s.request_id,
                                      static_cast<int32_t>(wire::Code::kResourceExhausted),
                                      "fake result arena full"));
    }
    FakeResult(m, c->inputs[m.segment].base + m.offset, results.At(slot));
    out.segment = slot.segment;
    out.offset = slot.offset;
    out.bytes = m.bytes;
    outstanding[s.request_id] = slot;
    state.outstanding_results = outstanding.size();
  }
  std::string tail(reinterpret_cast<const char*>(s.splits.data()), s.splits.size() * 8);
  Send(c, EncodeFrame(MsgType::kComplete, s.request_id, &out, sizeof(out), tail));
}

void FakeDaemon::Impl::HandleRelease(const wire::FrameHeader& h) {
  state.releases.push_back(h.request_id);
  auto it = outstanding.find(h.request_id);
  if (h.payload_bytes != 0 || it == outstanding.end()) {
    return Violation("bad RELEASE for request " + std::to_string(h.request_id));
  }
  results.Free(it->second);
  outstanding.erase(it);
  state.outstanding_results = outstanding.size();
}

void FakeDaemon::Impl::HandleGpuRegister(FakeConn* c, const wire::FrameHeader& h, const char* p) {
  wire::GpuRegister g;
  if (h.payload_bytes < sizeof(g)) return Violation("GPU_REGISTER too short");
  std::memcpy(&g, p, sizeof(g));
  if (h.payload_bytes != sizeof(g) + size_t{g.num_events} * wire::kIpcHandleBytes) {
    return Violation("GPU_REGISTER length does not match num_events");
  }
  ++state.gpu_registers;
  uintptr_t base = 0;  // the host double's handle: "ardfake\0", pid, address
  if (std::memcmp(g.arena_handle, "ardfake", 8) == 0) std::memcpy(&base, g.arena_handle + 16, 8);
  gpu_arenas[c] = {reinterpret_cast<char*>(base), g.arena_bytes};
  Send(c, EncodeFrame(MsgType::kGpuRegistered, h.request_id, nullptr, 0));
}

void FakeDaemon::Impl::HandleGpuSubmit(FakeConn* c, const wire::FrameHeader& h, const char* p) {
  ReceivedSubmit s;
  s.request_id = h.request_id;
  wire::GpuPlacement where;
  if (h.payload_bytes != sizeof(s.submit) + sizeof(where)) return Violation("GPU_SUBMIT length");
  std::memcpy(&s.submit, p, sizeof(s.submit));
  std::memcpy(&where, p + sizeof(s.submit), sizeof(where));
  state.gpu_submits.push_back(s);
  auto arena = gpu_arenas.find(c);
  if (arena == gpu_arenas.end() || arena->second.base == nullptr ||
      where.offset + s.submit.bytes > arena->second.bytes) {
    Violation("GPU_SUBMIT " + std::to_string(h.request_id) + " outside a registered arena");
    return Send(c, EncodeErrorFrame(MsgType::kError, h.request_id,
                                    static_cast<int32_t>(wire::Code::kInvalidArgument),
                                    "bad GPU placement"));
  }
  char* at = arena->second.base + where.offset;
  const bool from_elsewhere =
      s.submit.collective == static_cast<uint32_t>(wire::Collective::kBroadcast) &&
      s.submit.root_rank != options.welcome.rank;
  if (from_elsewhere) {
    std::memset(at, 0x42, s.submit.bytes);  // as if the root's tensor arrived
  } else {
    FakeResult(s.submit, at, at);
  }
  wire::Complete out{};
  out.ndims = s.submit.ndims;
  std::memcpy(out.shape, s.submit.shape, sizeof(out.shape));
  Send(c, EncodeFrame(MsgType::kComplete, h.request_id, &out, sizeof(out)));
}

void FakeDaemon::Impl::HandleGpuUnregister(FakeConn* c, const wire::FrameHeader& h) {
  if (h.payload_bytes != 0) Violation("GPU_UNREGISTER with a payload");
  state.gpu_unregisters.push_back(h.request_id);
  if (!options.answer_gpu_unregister) {
    gpu_unregisters_held.emplace_back(c, h.request_id);
    return;
  }
  gpu_arenas.erase(c);
  Send(c, EncodeFrame(MsgType::kGpuUnregistered, h.request_id, nullptr, 0));
}

void FakeDaemon::Impl::Close(size_t index) {
  FakeConn* c = conns[index].get();
  gpu_arenas.erase(c);
  auto& u = gpu_unregisters_held;
  u.erase(std::remove_if(u.begin(), u.end(), [c](const auto& e) { return e.first == c; }), u.end());
  for (auto it = held.begin(); it != held.end();) {
    it = it->second.first == c ? held.erase(it) : std::next(it);
  }
  conns.erase(conns.begin() + static_cast<long>(index));
  ++state.disconnects;
}

void FakeDaemon::SetHold(bool hold) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->options.hold_submits = hold;
}

bool FakeDaemon::CompleteHeld(uint64_t request_id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& d = *impl_;
  auto it = d.held.find(request_id);
  if (it == d.held.end()) return false;
  d.Answer(it->second.first, it->second.second);
  d.held.erase(it);
  auto& ids = d.state.held;
  ids.erase(std::remove(ids.begin(), ids.end(), request_id), ids.end());
  d.cv.notify_all();
  return true;
}

void FakeDaemon::CompleteAllHeld() {
  for (uint64_t id : State().held) CompleteHeld(id);
}

void FakeDaemon::SendFailedComplete(uint64_t request_id, int32_t code, const std::string& message) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  wire::Complete out{};
  out.code = code;
  out.message_bytes = static_cast<uint32_t>(message.size());
  for (auto& c : impl_->conns) {
    impl_->Send(c.get(), EncodeFrame(MsgType::kComplete, request_id, &out, sizeof(out), message));
  }
}

void FakeDaemon::SendError(uint64_t request_id, int32_t code, const std::string& message) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& c : impl_->conns) {
    impl_->Send(c.get(), EncodeErrorFrame(MsgType::kError, request_id, code, message));
  }
}

void FakeDaemon::SendNotify(int32_t code, const std::string& message) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& c : impl_->conns) {
    impl_->Send(c.get(), EncodeErrorFrame(MsgType::kNotify, 0, code, message));
  }
}

void FakeDaemon::AddResultSegment(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& d = *impl_;
  wire::Segment s = {d.results.AddSegment(bytes), 0, bytes};
  for (auto& c : d.conns) {
    d.Send(c.get(), EncodeFrame(MsgType::kResultSegment, 0, &s, sizeof(s)),
           ReopenReadOnly(d.results.fd(s.index)));
  }
}

void FakeDaemon::AnswerGpuUnregister() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  Impl& d = *impl_;
  for (const auto& [c, id] : d.gpu_unregisters_held) {
    d.gpu_arenas.erase(c);
    d.Send(c, EncodeFrame(MsgType::kGpuUnregistered, id, nullptr, 0));
  }
  d.gpu_unregisters_held.clear();
}

void FakeDaemon::CloseConnections() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  while (!impl_->conns.empty()) impl_->Close(0);
  impl_->Wake();
  impl_->cv.notify_all();
}

}  // namespace ard::client::testing
