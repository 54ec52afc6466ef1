#include "client/session.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <utility>

#include "client/request_codec.h"

namespace ard::client {
namespace {

using wire::MsgType;

template <typename T>
bool ReadPayload(const Frame& frame, T* out) {
  if (frame.payload_bytes != sizeof(T)) return false;
  std::memcpy(out, frame.payload, sizeof(T));
  return true;
}

Status WireStatus(int32_t code, std::string message) {
  if (code == 0) code = static_cast<int32_t>(wire::Code::kInternal);  // an error must fail
  return Status(static_cast<wire::Code>(code), std::move(message));
}

}  // namespace

Session::Session(const ClientConfig& config) : config_(config) {}

Status Session::Create(const ClientConfig& config, std::unique_ptr<Session>* out) {
  std::unique_ptr<Session> session(new Session(config));
  ARD_CLIENT_RETURN_IF_ERROR(session->Start());
  *out = std::move(session);
  return OkStatus();
}

Status Session::Start() {
  ARD_CLIENT_RETURN_IF_ERROR(Connection::Connect(config_.socket_path, &connection_));
  ARD_CLIENT_RETURN_IF_ERROR(InputArena::Create(
      config_.arena_segment_bytes, config_.arena_max_bytes,
      [this](uint32_t index, int fd, uint64_t bytes) { return PublishSegment(index, fd, bytes); },
      &arena_));
  shared_ = std::make_unique<SharedBuffers>(*arena_);
  if (Status hello = SendHello(); !hello.ok()) {
    // A daemon that refuses this process (peer_policy, max_clients) sends an ERROR at once and
    // may hang up before our HELLO: report its reason rather than the broken pipe.
    Frame frame;
    if (connection_->Receive(100, &frame).ok() &&
        static_cast<MsgType>(frame.header.type) == MsgType::kError) {
      int32_t code;
      std::string message;
      ARD_CLIENT_RETURN_IF_ERROR(DecodeError(frame.payload, frame.payload_bytes, &code, &message));
      return WireStatus(code, message);
    }
    return hello;
  }
  ARD_CLIENT_RETURN_IF_ERROR(AwaitWelcome());
  receiver_ = std::thread(&Session::ReceiveLoop, this);
  return OkStatus();
}

Session::~Session() {
  const bool free_gpu = UnregisterGpu();
  closing_ = true;
  if (connection_ != nullptr) {
    connection_->Send(MsgType::kBye, 0, nullptr, 0);  // best effort: the daemon may be gone
    connection_->Shutdown();
  }
  WakeReceiver();
  if (receiver_.joinable()) receiver_.join();
  try {
    Deliver(requests_.FailAll({wire::Code::kCancelled, "allreduced client destroyed"}, true));
  } catch (...) {  // out of memory while cancelling: nothing more can be done from a destructor
  }
  // CUDA: freeing memory (or an event) that another process still has open through IPC is
  // undefined and can poison the daemon's context for every job on that GPU. Without the daemon's
  // word the staging stays allocated until this process exits (its end closes the daemon's side).
  if (!free_gpu) (void)gpu_.release();
}

Status Session::SendHello() {
  wire::Hello hello{};
  std::strncpy(hello.job, config_.job.c_str(), sizeof(hello.job) - 1);
  hello.rank = config_.ranks.rank;
  hello.size = config_.ranks.size;
  hello.local_rank = config_.ranks.local_rank;
  hello.local_size = config_.ranks.local_size;
  hello.pid = static_cast<uint32_t>(::getpid());
  if (config_.elastic_min_np > 0) {  // the daemon numbers each generation (local_wire.h)
    hello.rank = config_.elastic_order;
    hello.size = config_.elastic_max_np;
    hello.local_rank = -1;  // local_size stays the launcher's: the first generation waits for it
    hello.elastic_min_np = static_cast<uint32_t>(config_.elastic_min_np);
  }
  hello.segment_bytes = arena_->first_segment_bytes();
  return connection_->Send(MsgType::kHello, 0, &hello, sizeof(hello), nullptr, 0,
                           arena_->first_segment_fd());
}

Status Session::AwaitWelcome() {
  auto start = std::chrono::steady_clock::now();
  while (true) {
    int left = -1;
    if (config_.timeout_ms >= 0) {
      auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - start);
      left = std::max<int>(0, config_.timeout_ms - static_cast<int>(spent.count()));
    }
    Frame frame;
    Status status = connection_->Receive(left, &frame);
    if (status.code() == wire::Code::kDeadlineExceeded) {
      return {wire::Code::kDeadlineExceeded,
              "job '" + config_.job + "'" +
                  (config_.job_source.empty() ? "" : " (from " + config_.job_source + ")") +
                  " did not form within " + std::to_string(config_.timeout_ms) +
                  " ms: the allreduced daemon at " + config_.socket_path +
                  " is still waiting for other ranks (ALLREDUCED_INIT_TIMEOUT_MS)"};
    }
    if (status.code() == wire::Code::kUnavailable) {
      return Unavailable("allreduced daemon at " + config_.socket_path +
                         " closed the connection during registration");
    }
    ARD_CLIENT_RETURN_IF_ERROR(status);
    auto type = static_cast<MsgType>(frame.header.type);
    if (type == MsgType::kWelcome) return AcceptWelcome(frame);
    if (type == MsgType::kError || type == MsgType::kNotify) {
      int32_t code;
      std::string message;
      ARD_CLIENT_RETURN_IF_ERROR(DecodeError(frame.payload, frame.payload_bytes, &code, &message));
      return WireStatus(code, message);
    }
    return Internal("unexpected frame type " + std::to_string(frame.header.type) +
                    " from the daemon before WELCOME");
  }
}

Status Session::AcceptWelcome(Frame& frame) {
  wire::Welcome welcome;
  if (!ReadPayload(frame, &welcome)) return Internal("WELCOME frame of the wrong length");
  if (welcome.result_segment_bytes > 0) {
    ARD_CLIENT_RETURN_IF_ERROR(results_.Map(0, std::move(frame.fd), welcome.result_segment_bytes));
  }
  topology_ = {welcome.rank,       welcome.size,       welcome.local_rank,
               welcome.local_size, welcome.cross_rank, welcome.cross_size};
  if (welcome.max_tensor_bytes > 0 && welcome.max_tensor_bytes < max_tensor_bytes_) {
    max_tensor_bytes_ = welcome.max_tensor_bytes;
  }
  return OkStatus();
}

Status Session::PublishSegment(uint32_t index, int fd, uint64_t bytes) {
  wire::Segment segment{index, 0, bytes};
  return connection_->Send(MsgType::kAddSegment, 0, &segment, sizeof(segment), nullptr, 0, fd);
}

Status Session::Submit(const ard_request& request, ard_done_fn done, void* user, uint64_t* handle) {
  ARD_CLIENT_RETURN_IF_ERROR(ValidateRequest(request, max_tensor_bytes_));
  ARD_CLIENT_RETURN_IF_ERROR(requests_.failure());  // fail fast, before taking a slot
  InputArena::Slot slot;
  if (request.bytes > 0 && !shared_->BeginUse(request.data, request.bytes, &slot)) {
    ARD_CLIENT_RETURN_IF_ERROR(arena_->Allocate(request.bytes, &slot));
    std::memcpy(slot.data, request.data, request.bytes);
    copied_input_bytes_.fetch_add(request.bytes, std::memory_order_relaxed);
  }
  wire::Submit submit;
  EncodeSubmit(request, slot, &submit);
  uint64_t id = next_handle_.fetch_add(1);
  if (done != nullptr) UseReceiver();                   // its callback runs when the answer is read
  Status status = requests_.Add(id, done, user, slot);  // before the send: answers find it
  if (!status.ok()) {
    ReturnSlot(slot);
    return status;
  }
  status = connection_->Send(MsgType::kSubmit, id, &submit, sizeof(submit), request.splits,
                             sizeof(int64_t) * static_cast<size_t>(request.num_splits));
  InputArena::Slot withdrawn;
  if (!status.ok() && requests_.Withdraw(id, &withdrawn)) {
    ReturnSlot(withdrawn);
    return status;
  }
  // Sent, or failed while a concurrent terminal failure already completed it: the handle is live.
  *handle = id;
  return OkStatus();
}

void Session::Release(uint64_t handle) {
  bool send_release = false;
  if (requests_.Release(handle, &send_release) && send_release) SendRelease(handle);
}

void Session::SendRelease(uint64_t handle) {
  // A failure means the connection is gone, and the daemon frees the job's slots with it.
  connection_->Send(MsgType::kRelease, handle, nullptr, 0);
}

Status Session::HandleFrame(Frame& frame) {
  switch (static_cast<MsgType>(frame.header.type)) {
    case MsgType::kComplete:
      return HandleComplete(frame);
    case MsgType::kError:
      return HandleError(frame, /*notify=*/false);
    case MsgType::kNotify:
      return HandleError(frame, /*notify=*/true);
    case MsgType::kGpuRegistered:
    case MsgType::kGpuUnregistered:
      if (HandleGpuReply(frame, OkStatus())) return OkStatus();
      return Internal("unexpected GPU_REGISTERED/GPU_UNREGISTERED for request " +
                      std::to_string(frame.header.request_id));
    case MsgType::kResultSegment: {
      wire::Segment segment;
      ARD_CLIENT_RETURN_IF_ERROR(DecodeSegment(frame.payload, frame.payload_bytes, &segment));
      return results_.Map(segment.index, std::move(frame.fd), segment.bytes);
    }
    default:
      return Internal("unexpected frame type " + std::to_string(frame.header.type));
  }
}

Status Session::HandleComplete(const Frame& frame) {
  DecodedComplete complete;
  ARD_CLIENT_RETURN_IF_ERROR(DecodeComplete(frame.payload, frame.payload_bytes, &complete));
  const wire::Complete& c = complete.fixed;
  uint64_t id = frame.header.request_id;
  Outcome outcome;
  outcome.status = Status(static_cast<wire::Code>(c.code), std::move(complete.message));
  if (c.code == 0 && c.bytes > 0) {
    Status located = results_.Locate(c.segment, c.offset, c.bytes, &outcome.data);
    if (!located.ok()) return located;
    outcome.bytes = c.bytes;
  } else if (c.bytes > 0) {
    SendRelease(id);  // a failed request has nothing to read; free the daemon's slot now
  }
  if (!FinishGpu(id, &outcome.status, &c)) {
    // A host submit: nothing more.
  }
  if (outcome.status.ok()) {
    outcome.ndims = static_cast<int>(c.ndims);
    std::memcpy(outcome.shape, c.shape, sizeof(outcome.shape));
    outcome.splits = std::move(complete.splits);
    outcome.join_last_rank = c.join_last_rank;
  }
  FreeInput(id);
  Finished finished;
  bool holds_slot = outcome.bytes > 0;
  if (requests_.Complete(id, std::move(outcome), &finished)) {
    Deliver({finished});
  } else if (holds_slot) {
    SendRelease(id);  // no longer wanted (already failed locally): free the daemon's slot
  }
  return OkStatus();
}

Status Session::HandleError(const Frame& frame, bool notify) {
  int32_t code;
  std::string message;
  ARD_CLIENT_RETURN_IF_ERROR(DecodeError(frame.payload, frame.payload_bytes, &code, &message));
  if (notify && code == 0) {  // informational event: nothing fails
    if (message == wire::kHostsUpdated) hosts_updated_ = true;
    return OkStatus();
  }
  Status status = WireStatus(code, std::move(message));
  uint64_t id = frame.header.request_id;
  if (!notify && id != 0 && HandleGpuReply(frame, status)) return OkStatus();
  if (notify || id == 0) {
    FailAll(status);  // job-level, or the daemon rejected a frame we cannot attribute
    return OkStatus();
  }
  Outcome outcome;
  outcome.status = status;
  FinishGpu(id, &outcome.status, nullptr);
  FreeInput(id);
  Finished finished;
  if (requests_.Complete(id, std::move(outcome), &finished)) Deliver({finished});
  return OkStatus();
}

void Session::FreeInput(uint64_t handle) {
  InputArena::Slot slot;
  if (requests_.TakeSlot(handle, &slot)) ReturnSlot(slot);
}

void Session::ReturnSlot(const InputArena::Slot& slot) {
  if (!shared_->EndUse(slot)) arena_->Free(slot);
}

void Session::FailAll(const Status& status) { Deliver(requests_.FailAll(status, true)); }

void Session::Deliver(std::vector<Finished> finished) {
  for (Finished& f : finished) {
    ReturnSlot(f.slot);
    if (f.done == nullptr) continue;
    try {
      f.done(f.user, f.handle, &f.result);
    } catch (...) {
      // A callback must not throw; swallowing keeps the receiver thread alive.
    }
  }
}

}  // namespace ard::client
