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
             std::shared_ptr<std::atomic<int>> mappings, HostWorld::State* world,
             std::shared_ptr<MappingTable> table = nullptr)
      : data_(data),
        size_(size),
        device_(device),
        id_(id),
        fd_(fd),
        mappings_(std::move(mappings)),
        world_(world),
        table_(std::move(table)) {
    if (mappings_) ++*mappings_;
    if (table_) {
      std::lock_guard<std::mutex> lock(table_->mu);
      table_->by_address[reinterpret_cast<uintptr_t>(data_)] = MappingTable::Entry{size_, id_};
    }
  }
  ~HostMemory() override {
    if (table_) {
      std::lock_guard<std::mutex> lock(table_->mu);
      table_->by_address.erase(reinterpret_cast<uintptr_t>(data_));
    }
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
  std::shared_ptr<MappingTable> table_;         // opened mappings only
};

// Page-locked host memory: ordinary heap memory that copies recognise (pageable_copies()).
class PinnedMemory : public Memory {
 public:
  PinnedMemory(size_t size, std::shared_ptr<MappingTable> table)
      : data_(new char[size]()), size_(size), table_(std::move(table)) {
    std::lock_guard<std::mutex> lock(table_->mu);
    table_->by_address[reinterpret_cast<uintptr_t>(data_.get())] = MappingTable::Entry{size_, 1};
  }
  ~PinnedMemory() override {
    std::lock_guard<std::mutex> lock(table_->mu);
    table_->by_address.erase(reinterpret_cast<uintptr_t>(data_.get()));
  }
  void* data() const override { return data_.get(); }
  size_t size() const override { return size_; }
  int device() const override { return kHostMemory; }

 private:
  std::unique_ptr<char[]> data_;
  size_t size_;
  std::shared_ptr<MappingTable> table_;
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

absl::StatusOr<bool> HostStream::Idle() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.ok()) return error_;
  return queue_.empty() && !running_;
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

uint64_t MappingTable::Find(const void* p, size_t bytes) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu);
  auto it = by_address.upper_bound(at);
  if (it == by_address.begin()) return 0;
  --it;
  return at + bytes <= it->first + it->second.bytes ? it->second.id : 0;
}

HostWorld::HostWorld() : state_(std::make_unique<State>()) {}
HostWorld::~HostWorld() = default;

int HostWorld::aborted_communicators() const { return state_->aborted_comms.load(); }
int HostWorld::finalized_communicators() const { return state_->finalized_comms.load(); }
int HostWorld::thread_violations() const { return state_->thread_violations.load(); }
void HostWorld::set_in_progress_polls(int polls) { state_->in_progress_polls = polls; }

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
    : world_(world),
      host_(std::move(host)),
      pid_(pid),
      device_count_(device_count),
      mappings_(std::make_shared<MappingTable>()),
      own_(std::make_shared<MappingTable>()),
      pinned_(std::make_shared<MappingTable>()) {}
HostDevice::~HostDevice() = default;

std::string HostDevice::Describe() const {
  return absl::StrCat("host test double (no GPU): cuda ", cuda_version_, " nccl ", nccl_version_);
}

absl::Status HostDevice::Lost() const {
  absl::MutexLock lock(&mu_);
  return sticky_.empty() ? absl::OkStatus() : sticky_.begin()->second;
}

absl::Status HostDevice::sticky(int device) const {
  absl::MutexLock lock(&mu_);
  auto it = sticky_.find(device);
  return it == sticky_.end() ? absl::OkStatus() : it->second;
}

absl::Status HostDevice::CheckMapped(const void* p, size_t bytes, int device) {
  const uint64_t id = mappings_->Find(p, bytes);
  if (id == 0) return absl::OkStatus();
  {
    HostWorld::State* w = world_.state();
    std::lock_guard<std::mutex> lock(w->mu);
    if (w->regions.count(id) != 0) return absl::OkStatus();
  }
  absl::Status error = StickyError(absl::InternalError(
      absl::StrCat("an illegal memory access was encountered (cudaErrorIllegalAddress) on GPU ",
                   device, ": an IPC mapping whose exporter freed the allocation")));
  absl::MutexLock lock(&mu_);
  sticky_.emplace(device, error);
  return error;
}

absl::StatusOr<int> HostDevice::DeviceCount() {
  if (device_count_ == 0) return absl::FailedPreconditionError("no CUDA device (test double)");
  return device_count_;
}

absl::Status HostDevice::CheckDevice(int device) const {
  if (device < 0 || device >= device_count_) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid device ordinal ", device, " (", device_count_, " GPUs)"));
  }
  absl::MutexLock lock(&mu_);
  if (contexts_.insert(device).second) ++lazy_contexts_;
  return absl::OkStatus();
}

absl::Status HostDevice::InitContexts() {
  absl::MutexLock lock(&mu_);
  for (int device = 0; device < device_count_; ++device) contexts_.insert(device);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Memory>> HostDevice::AllocateHost(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes");
  return std::unique_ptr<Memory>(new PinnedMemory(bytes, pinned_));
}

void HostDevice::CountCopy(const void* dst, const void* src, size_t bytes) {
  const bool dst_device = mappings_->Find(dst, bytes) != 0 || own_->Find(dst, bytes) != 0;
  const bool src_device = mappings_->Find(src, bytes) != 0 || own_->Find(src, bytes) != 0;
  if (dst_device && src_device) {
    ++device_copies_;
  } else if ((!dst_device && pinned_->Find(dst, bytes) == 0) ||
             (!src_device && pinned_->Find(src, bytes) == 0)) {
    ++pageable_copies_;
  }
}

absl::StatusOr<std::unique_ptr<Memory>> HostDevice::Allocate(int device, size_t bytes) {
  if (absl::Status s = CheckDevice(device); !s.ok()) return s;
  if (absl::Status s = sticky(device); !s.ok()) return s;
  if (bytes == 0) return absl::InvalidArgumentError("cannot allocate 0 bytes");
  ++allocations_;
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
  return std::unique_ptr<Memory>(new HostMemory(data, bytes, device, id, fd, nullptr, w, own_));
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
  return std::unique_ptr<Memory>(new HostMemory(data, it->second.bytes, device, fields->id, -1,
                                                open_mappings_, nullptr, mappings_));
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
  const int device = stream.device();
  CountCopy(dst, src, bytes);
  return Issue(
      stream,
      [this, dst, src, bytes, device] {
        if (absl::Status s = CheckMapped(dst, bytes, device); !s.ok()) return s;
        if (absl::Status s = CheckMapped(src, bytes, device); !s.ok()) return s;
        std::memmove(dst, src, bytes);
        return absl::OkStatus();
      },
      false);
}

absl::Status HostDevice::MemsetAsync(void* dst, int value, size_t bytes, Stream& stream) {
  const int device = stream.device();
  return Issue(
      stream,
      [this, dst, value, bytes, device] {
        if (absl::Status s = CheckMapped(dst, bytes, device); !s.ok()) return s;
        std::memset(dst, value, bytes);
        return absl::OkStatus();
      },
      false);
}

absl::Status HostDevice::Synchronize(Stream& stream) {
  return static_cast<HostStream&>(stream).Drain();
}

absl::StatusOr<bool> HostDevice::Query(Stream& stream) {
  if (absl::Status s = sticky(stream.device()); !s.ok()) return s;
  return static_cast<HostStream&>(stream).Idle();
}

bool HostDevice::InGroup() const {
  absl::MutexLock lock(&mu_);
  auto it = group_depth_.find(std::this_thread::get_id());
  return it != group_depth_.end() && it->second > 0;
}

absl::Status HostDevice::Issue(Stream& stream, std::function<absl::Status()> task, bool) {
  if (absl::Status s = sticky(stream.device()); !s.ok()) return s;
  static_cast<HostStream&>(stream).Push(std::move(task));
  return absl::OkStatus();
}

void HostDevice::Defer(Communicator* comm, Stream& stream, std::function<absl::Status()> task) {
  absl::MutexLock lock(&mu_);
  deferred_[std::this_thread::get_id()].push_back(Deferred{comm, &stream, std::move(task)});
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
  for (Deferred& d : launch) AcceptDeferred(d.comm, *d.stream, std::move(d.task));
  return absl::OkStatus();
}

}  // namespace ard::gpu::testing
