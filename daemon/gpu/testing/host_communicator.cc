// TEST DOUBLE: the communicator half of HostDevice (see host_device.h).
#include <chrono>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/collectives/reduce_kernels.h"
#include "daemon/gpu/testing/host_internal.h"

#define ARD_HOST_RETURN_IF_ERROR(expr)           \
  do {                                           \
    absl::Status ard_host_st_ = (expr);          \
    if (!ard_host_st_.ok()) return ard_host_st_; \
  } while (0)

namespace ard::gpu::testing {
namespace {

enum class Kind { kAllreduce, kBroadcast, kAllgather, kReduceScatter };

struct Spec {
  Kind kind;
  wire::DataType dtype;
  wire::ReduceOp op = wire::ReduceOp::kSum;
  int average_over = 1;
  int root = 0;
  size_t count = 0;  // send elements per rank (Allgather), recv elements (ReduceScatter), else n
};

// Every rank's result, from every rank's send buffer. Runs on the last rank to arrive, while the
// others wait, so no send buffer changes meanwhile.
void Compute(const Spec& spec, CollectiveSlot& slot, int size) {
  size_t esize = wire::DataTypeSize(static_cast<uint32_t>(spec.dtype));
  size_t reduce_count = spec.kind == Kind::kReduceScatter ? spec.count * size : spec.count;
  std::vector<uint8_t> full;
  if (spec.kind == Kind::kAllreduce || spec.kind == Kind::kReduceScatter) {
    full.assign(static_cast<const uint8_t*>(slot.sends[0]),
                static_cast<const uint8_t*>(slot.sends[0]) + reduce_count * esize);
    for (int r = 1; r < size; ++r) {
      collectives::ReduceInto(full.data(), slot.sends[r], reduce_count, spec.dtype, spec.op);
    }
    if (spec.op == wire::ReduceOp::kAverage) {
      collectives::Scale(full.data(), reduce_count, spec.dtype, 1.0 / spec.average_over);
    }
  }
  slot.results.assign(size, {});
  for (int r = 0; r < size; ++r) {
    auto& out = slot.results[r];
    switch (spec.kind) {
      case Kind::kAllreduce:
        out = full;
        break;
      case Kind::kReduceScatter:
        out.assign(full.begin() + r * spec.count * esize,
                   full.begin() + (r + 1) * spec.count * esize);
        break;
      case Kind::kBroadcast: {
        auto* src = static_cast<const uint8_t*>(slot.sends[spec.root]);
        out.assign(src, src + spec.count * esize);
        break;
      }
      case Kind::kAllgather:
        for (int s = 0; s < size; ++s) {
          auto* src = static_cast<const uint8_t*>(slot.sends[s]);
          out.insert(out.end(), src, src + spec.count * esize);
        }
        break;
    }
  }
}

// What ncclComm_t points at. Abort frees it (NCCL's commReclaim) and the communicator keeps the
// dangling pointer, as a caller keeps its ncclComm_t: a thread still inside a call on the comm
// when another thread aborts it touches freed memory, which ASan reports.
struct HostCommState {
  std::shared_ptr<CommGroup> group;
  uint64_t next_seq = 0;
  int local_ranks_in_process = 1;
  std::shared_ptr<std::atomic<bool>> aborted = std::make_shared<std::atomic<bool>>(false);
  // Accepted calls not yet on their stream (ncclInProgress): they reach it after `polls_left`
  // more State() calls, so work queued on the stream before that runs first.
  std::vector<std::pair<Stream*, std::function<absl::Status()>>> pending;
  int polls_left = 0;
  // Collectives on the stream and how many of them ran (finalize waits for them).
  uint64_t issued = 0;
  std::shared_ptr<std::atomic<uint64_t>> ran = std::make_shared<std::atomic<uint64_t>>(0);
  bool finalizing = false;
  bool finalized = false;  // Finalize done: the destructor destroys instead of aborting
};

class HostCommunicator : public Communicator {
 public:
  HostCommunicator(HostDevice& device, std::shared_ptr<CommGroup> group, int rank, int gpu,
                   int local_ranks_in_process)
      : device_(device),
        world_(*device.world().state()),
        state_(new HostCommState),
        rank_(rank),
        gpu_(gpu),
        size_(group->size),
        owner_(std::this_thread::get_id()) {
    state_->group = std::move(group);
    state_->local_ranks_in_process = local_ranks_in_process;
    state_->polls_left = world_.in_progress_polls.load();
    world_.live_comms.fetch_add(1);
  }
  ~HostCommunicator() override {
    if (aborted_) return;
    CheckThread();
    if (!state_->finalized) {
      Abort();  // as ncclCommAbort
      return;
    }
    aborted_ = true;  // ncclCommDestroy after ncclCommFinalize: peers see nothing
    delete state_;
    world_.live_comms.fetch_sub(1);
    world_.finalized_comms.fetch_add(1);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const override { return gpu_; }

  absl::Status Allreduce(const void* send, void* recv, size_t count, wire::DataType dtype,
                         wire::ReduceOp op, int average_over, Stream& stream) override {
    ARD_HOST_RETURN_IF_ERROR(Enter());
    if (!collectives::ReductionSupported(dtype)) {
      return absl::InvalidArgumentError("dtype not supported by reductions (ncclInvalidArgument)");
    }
    if (op == wire::ReduceOp::kAverage && average_over != size_ && !Floating(dtype)) {
      // NCCL's ncclRedOpCreatePreMulSum takes floating-point scalars only.
      return absl::UnimplementedError("integer average over other than the communicator size");
    }
    device_.CountCall("allreduce");
    return Enqueue(Spec{Kind::kAllreduce, dtype, op, average_over, 0, count}, send, recv, stream);
  }
  absl::Status Broadcast(const void* send, void* recv, size_t count, wire::DataType dtype, int root,
                         Stream& stream) override {
    ARD_HOST_RETURN_IF_ERROR(Enter());
    if (root < 0 || root >= size()) return absl::InvalidArgumentError("broadcast root");
    device_.CountCall("broadcast");
    return Enqueue(Spec{Kind::kBroadcast, dtype, wire::ReduceOp::kSum, 1, root, count}, send, recv,
                   stream);
  }
  absl::Status Allgather(const void* send, void* recv, size_t send_count, wire::DataType dtype,
                         Stream& stream) override {
    ARD_HOST_RETURN_IF_ERROR(Enter());
    device_.CountCall("allgather");
    return Enqueue(Spec{Kind::kAllgather, dtype, wire::ReduceOp::kSum, 1, 0, send_count}, send,
                   recv, stream);
  }
  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count, wire::DataType dtype,
                             wire::ReduceOp op, Stream& stream) override {
    ARD_HOST_RETURN_IF_ERROR(Enter());
    device_.CountCall("reducescatter");
    return Enqueue(Spec{Kind::kReduceScatter, dtype, op, size(), 0, recv_count}, send, recv,
                   stream);
  }

  absl::StatusOr<CommState> State() override {
    if (aborted_) return absl::FailedPreconditionError("communicator aborted");
    CheckThread();
    CommGroup& group = *state_->group;
    {
      std::lock_guard<std::mutex> lock(group.mu);
      if (!group.failure.ok()) return group.failure;
      if (group.joined < group.size) return CommState::kInProgress;  // init
    }
    if (!state_->pending.empty()) {
      if (--state_->polls_left > 0) return CommState::kInProgress;
      for (auto& [stream, task] : state_->pending) {
        static_cast<void>(device_.Issue(*stream, std::move(task), /*collective=*/false));
      }
      state_->pending.clear();
      return CommState::kInProgress;  // on the stream now; the next poll says so
    }
    if (state_->finalizing) {
      if (state_->ran->load() < state_->issued) return CommState::kInProgress;
      state_->finalized = true;
    }
    return CommState::kReady;
  }

  absl::Status Finalize() override {
    ARD_HOST_RETURN_IF_ERROR(Enter());
    state_->finalizing = true;
    return absl::OkStatus();
  }

  // Fails the group's pending work, then frees the state (the handle now dangles).
  void Abort() override {
    if (aborted_.exchange(true)) return;
    CheckThread();
    HostCommState* state = state_;
    state->aborted->store(true);
    {
      std::lock_guard<std::mutex> lock(state->group->mu);
      if (state->group->failure.ok()) {
        state->group->failure = absl::UnavailableError(absl::StrCat("rank ", rank_, " aborted"));
      }
      state->group->cv.notify_all();
    }
    delete state;
    world_.live_comms.fetch_sub(1);
    world_.aborted_comms.fetch_add(1);
  }

  // GroupEnd: a call deferred by the group is accepted now, in progress.
  void Accept(Stream& stream, std::function<absl::Status()> task) {
    state_->pending.emplace_back(&stream, std::move(task));
    state_->polls_left = world_.in_progress_polls.load();
  }

 private:
  static bool Floating(wire::DataType dtype) {
    return dtype == wire::DataType::kFloat16 || dtype == wire::DataType::kBfloat16 ||
           dtype == wire::DataType::kFloat32 || dtype == wire::DataType::kFloat64;
  }

  // Only the thread that drives a communicator may call it (NCCL frees it on abort under any
  // other thread's call): a call from another thread is counted, for tests to check.
  void CheckThread() const {
    if (std::this_thread::get_id() != owner_) world_.thread_violations.fetch_add(1);
  }

  absl::Status Enter() {
    if (aborted_) return absl::FailedPreconditionError("communicator aborted");
    CheckThread();
    return device_.TakeInjectedFailure();
  }

  absl::Status Enqueue(Spec spec, const void* send, void* recv, Stream& stream) {
    if (stream.device() != gpu_) {
      return absl::InvalidArgumentError("stream is on another device than the communicator");
    }
    if (state_->local_ranks_in_process > 1 && !device_.InGroup()) {
      return absl::FailedPreconditionError(
          "collective on one of several local ranks outside GroupStart/GroupEnd would deadlock");
    }
    uint64_t seq = state_->next_seq++;
    ++state_->issued;
    auto group = state_->group;
    int rank = rank_;
    auto aborted = state_->aborted;
    auto ran = state_->ran;
    HostDevice* device = &device_;
    const int gpu = gpu_;
    std::function<absl::Status()> task = [group, rank, seq, spec, send, recv, aborted, ran, device,
                                          gpu] {
      struct Ran {
        std::atomic<uint64_t>& n;
        ~Ran() { n.fetch_add(1); }
      } counted{*ran};
      // The kernel reads and writes the buffers: a freed IPC mapping is an illegal address.
      for (const void* p : {send, static_cast<const void*>(recv)}) {
        if (absl::Status s = device->CheckMapped(p, 1, gpu); !s.ok()) return s;
      }
      std::unique_lock<std::mutex> lock(group->mu);
      CollectiveSlot& slot = group->slots[seq];
      if (slot.sends.empty()) slot.sends.assign(group->size, nullptr);
      slot.sends[rank] = send;
      if (++slot.arrived == group->size && group->failure.ok()) {
        Compute(spec, slot, group->size);
        slot.done = true;
        group->cv.notify_all();
      }
      group->cv.wait(lock, [&] { return slot.done || !group->failure.ok() || *aborted; });
      if (!slot.done) {
        return absl::UnavailableError(absl::StrCat(
            "collective failed: ", group->failure.ok() ? "aborted" : group->failure.message()));
      }
      const std::vector<uint8_t>& out = slot.results[rank];
      std::memcpy(recv, out.data(), out.size());
      if (++slot.departed == group->size) group->slots.erase(seq);
      return absl::OkStatus();
    };
    if (device_.InGroup()) {
      device_.Defer(this, stream, std::move(task));
    } else {
      Accept(stream, std::move(task));
    }
    return absl::OkStatus();
  }

  HostDevice& device_;
  HostWorld::State& world_;
  HostCommState* state_;  // freed by Abort; never reset, like a caller's ncclComm_t
  std::atomic<bool> aborted_{false};
  const int rank_;
  const int gpu_;
  const int size_;
  const std::thread::id owner_;  // the thread that created it drives it
};

}  // namespace

void AcceptDeferred(Communicator* comm, Stream& stream, std::function<absl::Status()> task) {
  static_cast<HostCommunicator*>(comm)->Accept(stream, std::move(task));
}

int HostWorld::live_communicators() const { return state_->live_comms.load(); }

absl::StatusOr<UniqueId> HostDevice::NewUniqueId() {
  UniqueId id{};
  std::random_device rd;
  for (auto& b : id) b = static_cast<uint8_t>(rd());
  return id;
}

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> HostDevice::InitCommunicators(
    const UniqueId& id, int size, const std::vector<CommRank>& local) {
  if (size <= 0 || local.empty()) return absl::InvalidArgumentError("empty communicator");
  for (const CommRank& r : local) {
    if (absl::Status s = CheckDevice(r.device); !s.ok()) return s;
    if (r.rank < 0 || r.rank >= size) return absl::InvalidArgumentError("rank out of range");
  }
  std::shared_ptr<CommGroup> group;
  {
    HostWorld::State* w = world_.state();
    std::lock_guard<std::mutex> lock(w->mu);
    auto& slot = w->groups[std::vector<uint8_t>(id.begin(), id.end())];
    if (slot == nullptr) {
      slot = std::make_shared<CommGroup>();
      slot->size = size;
      slot->rank_taken.assign(size, false);
    }
    group = slot;
  }
  {
    std::lock_guard<std::mutex> lock(group->mu);
    if (group->size != size) return absl::InvalidArgumentError("communicator size mismatch");
    for (const CommRank& r : local) {
      std::string gpu = absl::StrCat(host_, "/", r.device);
      for (const std::string& other : group->gpu_of_rank) {
        if (other == gpu) {
          return absl::InvalidArgumentError(
              absl::StrCat("duplicate GPU detected: ", gpu, " holds two ranks"));
        }
      }
      if (group->rank_taken[r.rank]) {
        return absl::InvalidArgumentError(absl::StrCat("rank ", r.rank, " joined twice"));
      }
    }
    for (const CommRank& r : local) {
      group->rank_taken[r.rank] = true;
      group->gpu_of_rank.push_back(absl::StrCat(host_, "/", r.device));
    }
    group->joined += static_cast<int>(local.size());
    group->cv.notify_all();
  }
  // Nonblocking: each communicator says kInProgress until every rank joined.
  std::vector<std::unique_ptr<Communicator>> comms;
  for (const CommRank& r : local) {
    comms.push_back(std::make_unique<HostCommunicator>(*this, group, r.rank, r.device,
                                                       static_cast<int>(local.size())));
  }
  return comms;
}

}  // namespace ard::gpu::testing
