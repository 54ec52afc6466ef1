// TEST DOUBLE: see host_device.h.
#include "daemon/gpu/testing/host_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "daemon/gpu/testing/host_internal.h"

namespace ard::gpu::testing {
namespace {

constexpr char kMemoryMagic[8] = {'A', 'R', 'D', 'H', 'O', 'S', 'T', 'M'};
constexpr char kEventMagic[8] = {'A', 'R', 'D', 'H', 'O', 'S', 'T', 'E'};

struct HandleFields {
  char magic[8];
  uint32_t pid;
  uint32_t device;
  uint64_t id;
};

IpcHandle MakeHandle(const char (&magic)[8], uint32_t pid, int device, uint64_t id) {
  HandleFields f{};
  std::memcpy(f.magic, magic, sizeof(f.magic));
  f.pid = pid;
  f.device = static_cast<uint32_t>(device);
  f.id = id;
  IpcHandle handle{};
  std::memcpy(handle.data(), &f, sizeof(f));
  return handle;
}

absl::StatusOr<HandleFields> ParseHandle(const char (&magic)[8], const IpcHandle& handle) {
  HandleFields f;
  std::memcpy(&f, handle.data(), sizeof(f));
  if (std::memcmp(f.magic, magic, sizeof(f.magic)) != 0) {
    return absl::InvalidArgumentError("not an IPC handle (invalid resource handle)");
  }
  return f;
}

class HostMemory : public Memory {
 public:
  HostMemory(void* data, size_t size, int device, uint64_t id, int fd,
             std::shared_ptr<std::atomic<int>> mappings, HostWorld::State* world)
      : data_(data),
        size_(size),
        device_(device),
        id_(id),
        fd_(fd),
        mappings_(std::move(mappings)),
        world_(world) {
    if (mappings_) ++*mappings_;
  }
  ~HostMemory() override {
    munmap(data_, size_);
    if (mappings_) --*mappings_;
    if (world_ != nullptr) {  // the exporter frees: the handle goes stale
      std::lock_guard<std::mutex> lock(world_->mu);
      world_->regions.erase(id_);
      close(fd_);
    }
  }
  void* data() const override { return data_; }
  size_t size() const override { return size_; }
  int device() const override { return device_; }
  uint64_t id() const { return id_; }
  bool owned() const { return world_ != nullptr; }

 private:
  void* data_;
  size_t size_;
  int device_;
  uint64_t id_;
  int fd_;
  std::shared_ptr<std::atomic<int>> mappings_;  // opened mappings only
  HostWorld::State* world_;                     // allocations only: not owned
};

class HostEvent : public Event {
 public:
  explicit HostEvent(std::shared_ptr<EventState> state) : state_(std::move(state)) {}
  int device() const override { return state_->device; }
  const std::shared_ptr<EventState>& state() const { return state_; }

 private:
  std::shared_ptr<EventState> state_;
};

}  // namespace

HostStream::HostStream(int device) : device_(device), thread_([this] { Run(); }) {}

HostStream::~HostStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HostStream::Push(std::function<absl::Status()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_all();
}

absl::Status HostStream::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return (queue_.empty() && !running_) || stopping_; });
  return error_;
}

void HostStream::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
    if (stopping_) return;
    std::function<absl::Status()> task = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    bool skip = !error_.ok();  // a failed stream runs nothing more (sticky error)
    lock.unlock();
    absl::Status status = skip ? absl::OkStatus() : task();
    lock.lock();
    running_ = false;
    if (error_.ok() && !status.ok()) error_ = status;
    cv_.notify_all();
  }
}

HostWorld::HostWorld() : state_(std::make_unique<State>()) {}
HostWorld::~HostWorld() = default;

void HostWorld::FailCommunicator(const UniqueId& id, absl::Status status) {
  std::shared_ptr<CommGroup> group;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->groups.find(std::vector<uint8_t>(id.begin(), id.end()));
    if (it == state_->groups.end()) return;
    group = it->second;
  }
  std::lock_guard<std::mutex> lock(group->mu);
  if (group->failure.ok()) group->failure = std::move(status);
  group->cv.notify_all();
}

HostDevice::HostDevice(HostWorld& world, std::string host, uint32_t pid, int device_count)
    : world_(world), host_(std::move(host)), pid_(pid), device_count_(device_count) {}
HostDevice::~HostDevice() = default;

std::string HostDevice::Describe() const { return "host test double (no GPU)"; }

absl::StatusOr<int> HostDevice::DeviceCount() {
  if (device_count_ == 0) return absl::FailedPreconditionError("no CUDA device (test double)");
  return device_count_;
}

absl::Status HostDevice::CheckDevice(int device) const {
  if (device < 0 || device >= device_count_) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid device ordinal ", device, " (", device_count_, " GPUs)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Memory>> HostDevice::Allocate(int device, size_t bytes) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes");
  int fd = memfd_create("ard-host-device", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    if (fd >= 0) close(fd);
    return absl::ResourceExhaustedError("memfd for simulated device memory");
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    close(fd);
    return absl::ResourceExhaustedError("mmap of simulated device memory");
  }
  HostWorld::State* w = world_.state();
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(w->mu);
    id = w->next_id++;
    w->regions[id] = HostWorld::State::Region{fd, bytes, device, pid_};
  }
  return std::unique_ptr<Memory>(new HostMemory(data, bytes, device, id, fd, nullptr, w));
}

absl::StatusOr<IpcHandle> HostDevice::ExportMemory(const Memory& memory) {
  auto* m = dynamic_cast<const HostMemory*>(&memory);
  if (m == nullptr || !m->owned()) {
    return absl::InvalidArgumentError("only an allocation of this process can be exported");
  }
  return MakeHandle(kMemoryMagic, pid_, m->device(), m->id());
}

absl::StatusOr<std::unique_ptr<Memory>> HostDevice::OpenMemory(int device,
                                                               const IpcHandle& handle) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  auto fields = ParseHandle(kMemoryMagic, handle);
  if (!fields.ok()) return fields.status();
  HostWorld::State* w = world_.state();
  std::lock_guard<std::mutex> lock(w->mu);
  auto it = w->regions.find(fields->id);
  if (it == w->regions.end()) {
    return absl::InvalidArgumentError("IPC memory handle is stale (the allocation was freed)");
  }
  if (it->second.owner_pid == pid_) {
    return absl::InvalidArgumentError("an IPC memory handle cannot be opened by its exporter");
  }
  if (it->second.device != device) {
    return absl::InvalidArgumentError(
        absl::StrCat("IPC memory handle is for device ", it->second.device, ", not ", device));
  }
  void* data =
      mmap(nullptr, it->second.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, it->second.fd, 0);
  if (data == MAP_FAILED) return absl::ResourceExhaustedError("mmap of an IPC mapping");
  ++memory_opens_;
  return std::unique_ptr<Memory>(
      new HostMemory(data, it->second.bytes, device, fields->id, -1, open_mappings_, nullptr));
}

absl::StatusOr<std::unique_ptr<Event>> HostDevice::CreateEvent(int device, bool interprocess) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  auto state = std::make_shared<EventState>();
  state->device = device;
  state->interprocess = interprocess;
  state->owner_pid = pid_;
  HostWorld::State* w = world_.state();
  std::lock_guard<std::mutex> lock(w->mu);
  state->id = w->next_id++;
  if (interprocess) w->events[state->id] = state;
  return std::unique_ptr<Event>(new HostEvent(state));
}

absl::StatusOr<IpcHandle> HostDevice::ExportEvent(const Event& event) {
  auto* e = dynamic_cast<const HostEvent*>(&event);
  if (e == nullptr || !e->state()->interprocess) {
    return absl::InvalidArgumentError("event was not created with the interprocess flag");
  }
  return MakeHandle(kEventMagic, pid_, e->device(), e->state()->id);
}

absl::StatusOr<std::unique_ptr<Event>> HostDevice::OpenEvent(int device, const IpcHandle& handle) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  auto fields = ParseHandle(kEventMagic, handle);
  if (!fields.ok()) return fields.status();
  HostWorld::State* w = world_.state();
  std::lock_guard<std::mutex> lock(w->mu);
  auto it = w->events.find(fields->id);
  std::shared_ptr<EventState> state = it == w->events.end() ? nullptr : it->second.lock();
  if (state == nullptr) return absl::InvalidArgumentError("IPC event handle is stale");
  if (state->owner_pid == pid_) {
    return absl::InvalidArgumentError("an IPC event handle cannot be opened by its exporter");
  }
  if (state->device != device) {
    return absl::InvalidArgumentError(
        absl::StrCat("IPC event handle is for device ", state->device, ", not ", device));
  }
  return std::unique_ptr<Event>(new HostEvent(state));
}

absl::StatusOr<std::unique_ptr<Stream>> HostDevice::CreateStream(int device) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  return std::unique_ptr<Stream>(new HostStream(device));
}

absl::Status HostDevice::Record(Event& event, Stream& stream) {
  std::shared_ptr<EventState> state = static_cast<HostEvent&>(event).state();
  if (state->device != stream.device()) {
    return absl::InvalidArgumentError("event and stream are on different devices");
  }
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    generation = ++state->recorded;
  }
  return Issue(
      stream,
      [state, generation] {
        std::lock_guard<std::mutex> lock(state->mu);
        if (state->completed < generation) state->completed = generation;
        state->cv.notify_all();
        return absl::OkStatus();
      },
      false);
}

absl::Status HostDevice::Wait(Stream& stream, Event& event) {
  std::shared_ptr<EventState> state = static_cast<HostEvent&>(event).state();
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(state->mu);
    target = state->recorded;  // the most recent Record issued before this Wait
  }
  auto* host_stream = static_cast<HostStream*>(&stream);
  return Issue(
      stream,
      [state, target, host_stream] {
        std::unique_lock<std::mutex> lock(state->mu);
        while (state->completed < target && !host_stream->stopping()) {
          state->cv.wait_for(lock, std::chrono::milliseconds(10));
        }
        return absl::OkStatus();
      },
      false);
}

absl::Status HostDevice::CopyAsync(void* dst, const void* src, size_t bytes, Stream& stream) {
  return Issue(
      stream,
      [dst, src, bytes] {
        std::memmove(dst, src, bytes);
        return absl::OkStatus();
      },
      false);
}

absl::Status HostDevice::MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) {
  return Issue(
      stream,
      [dst, value, bytes] {
        std::memset(dst, value, bytes);
        return absl::OkStatus();
      },
      false);
}

absl::Status HostDevice::Synchronize(Stream& stream) {
  return static_cast<HostStream&>(stream).Drain();
}

bool HostDevice::InGroup() const {
  absl::MutexLock lock(&mu_);
  auto it = group_depth_.find(std::this_thread::get_id());
  return it != group_depth_.end() && it->second > 0;
}

absl::Status HostDevice::Issue(Stream& stream, std::function<absl::Status()> task,
                               bool collective) {
  if (collective) {
    absl::MutexLock lock(&mu_);
    auto it = group_depth_.find(std::this_thread::get_id());
    if (it != group_depth_.end() && it->second > 0) {
      deferred_[std::this_thread::get_id()].push_back(Deferred{&stream, std::move(task)});
      return absl::OkStatus();
    }
  }
  static_cast<HostStream&>(stream).Push(std::move(task));
  return absl::OkStatus();
}

absl::Status HostDevice::GroupStart() {
  absl::MutexLock lock(&mu_);
  ++group_depth_[std::this_thread::get_id()];
  return absl::OkStatus();
}

absl::Status HostDevice::GroupEnd() {
  std::vector<Deferred> launch;
  {
    absl::MutexLock lock(&mu_);
    int& depth = group_depth_[std::this_thread::get_id()];
    if (depth == 0) return absl::FailedPreconditionError("GroupEnd without GroupStart");
    if (--depth > 0) return absl::OkStatus();
    launch.swap(deferred_[std::this_thread::get_id()]);
  }
  ++group_ends_;
  for (Deferred& d : launch) static_cast<HostStream*>(d.stream)->Push(std::move(d.task));
  return absl::OkStatus();
}

}  // namespace ard::gpu::testing
