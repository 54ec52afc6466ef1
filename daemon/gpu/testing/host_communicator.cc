// TEST DOUBLE: the communicator half of HostDevice (see host_device.h).
#include <chrono>
#include <random>

#include "absl/strings/str_cat.h"
#include "daemon/collectives/reduce_kernels.h"
#include "daemon/gpu/testing/host_internal.h"

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
struct CommState {
  std::shared_ptr<CommGroup> group;
  uint64_t next_seq = 0;
  int local_ranks_in_process = 1;
  std::shared_ptr<std::atomic<bool>> aborted = std::make_shared<std::atomic<bool>>(false);
};

class HostCommunicator : public Communicator {
 public:
  HostCommunicator(HostDevice& device, std::shared_ptr<CommGroup> group, int rank, int gpu,
                   int local_ranks_in_process)
      : device_(device), state_(new CommState), rank_(rank), gpu_(gpu), size_(group->size) {
    state_->group = std::move(group);
    state_->local_ranks_in_process = local_ranks_in_process;
    device_.world().state()->live_comms.fetch_add(1);
  }
  ~HostCommunicator() override { Abort(); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const override { return gpu_; }

  absl::Status Allreduce(const void* send, void* recv, size_t count, wire::DataType dtype,
                         wire::ReduceOp op, int average_over, Stream& stream) override {
    if (!collectives::ReductionSupported(dtype)) {
      return absl::InvalidArgumentError("dtype not supported by reductions");
    }
    device_.CountCall("allreduce");
    return Enqueue(Spec{Kind::kAllreduce, dtype, op, average_over, 0, count}, send, recv, stream);
  }
  absl::Status Broadcast(const void* send, void* recv, size_t count, wire::DataType dtype, int root,
                         Stream& stream) override {
    if (root < 0 || root >= size()) return absl::InvalidArgumentError("broadcast root");
    device_.CountCall("broadcast");
    return Enqueue(Spec{Kind::kBroadcast, dtype, wire::ReduceOp::kSum, 1, root, count}, send, recv,
                   stream);
  }
  absl::Status Allgather(const void* send, void* recv, size_t send_count, wire::DataType dtype,
                         Stream& stream) override {
    device_.CountCall("allgather");
    return Enqueue(Spec{Kind::kAllgather, dtype, wire::ReduceOp::kSum, 1, 0, send_count}, send,
                   recv, stream);
  }
  absl::Status ReduceScatter(const void* send, void* recv, size_t recv_count, wire::DataType dtype,
                             wire::ReduceOp op, Stream& stream) override {
    device_.CountCall("reducescatter");
    return Enqueue(Spec{Kind::kReduceScatter, dtype, op, size(), 0, recv_count}, send, recv,
                   stream);
  }

  absl::Status AsyncError() override {
    if (aborted_) return absl::FailedPreconditionError("communicator aborted");
    CommGroup& group = *state_->group;
    std::lock_guard<std::mutex> lock(group.mu);
    return group.failure;
  }

  // Fails the group's pending work, then frees the state (the handle now dangles).
  void Abort() override {
    if (aborted_.exchange(true)) return;
    CommState* state = state_;
    state->aborted->store(true);
    {
      std::lock_guard<std::mutex> lock(state->group->mu);
      if (state->group->failure.ok()) {
        state->group->failure = absl::UnavailableError(absl::StrCat("rank ", rank_, " aborted"));
      }
      state->group->cv.notify_all();
    }
    delete state;
    device_.world().state()->live_comms.fetch_sub(1);
  }

 private:
  absl::Status Enqueue(Spec spec, const void* send, void* recv, Stream& stream) {
    if (aborted_) return absl::FailedPreconditionError("communicator aborted");
    if (stream.device() != gpu_) {
      return absl::InvalidArgumentError("stream is on another device than the communicator");
    }
    if (state_->local_ranks_in_process > 1 && !device_.InGroup()) {
      return absl::FailedPreconditionError(
          "collective on one of several local ranks outside GroupStart/GroupEnd would deadlock");
    }
    uint64_t seq = state_->next_seq++;
    auto group = state_->group;
    int rank = rank_;
    auto aborted = state_->aborted;
    return device_.Issue(
        stream,
        [group, rank, seq, spec, send, recv, aborted] {
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
        },
        true);
  }

  HostDevice& device_;
  CommState* state_;  // freed by Abort; never reset, like a caller's ncclComm_t
  std::atomic<bool> aborted_{false};
  const int rank_;
  const int gpu_;
  const int size_;
};

}  // namespace

std::unique_ptr<Communicator> MakeHostCommunicator(HostDevice& device,
                                                   std::shared_ptr<CommGroup> group, int rank,
                                                   int gpu) {
  return std::make_unique<HostCommunicator>(device, std::move(group), rank, gpu, 1);
}

int HostWorld::live_communicators() const { return state_->live_comms.load(); }

absl::StatusOr<UniqueId> HostDevice::NewUniqueId() {
  UniqueId id{};
  std::random_device rd;
  for (auto& b : id) b = static_cast<uint8_t>(rd());
  return id;
}

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> HostDevice::InitCommunicators(
    const UniqueId& id, int size, const std::vector<CommRank>& local, absl::Duration timeout) {
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
    std::unique_lock<std::mutex> lock(group->mu);
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
    bool formed = group->cv.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] {
      return group->joined == group->size || !group->failure.ok();
    });
    if (!formed) {
      group->failure = absl::DeadlineExceededError("communicator init timed out");
      group->cv.notify_all();
      return absl::DeadlineExceededError(absl::StrCat("communicator init: ", group->joined, " of ",
                                                      size, " ranks joined within ",
                                                      absl::FormatDuration(timeout)));
    }
    if (!group->failure.ok()) return group->failure;
  }
  std::vector<std::unique_ptr<Communicator>> comms;
  for (const CommRank& r : local) {
    comms.push_back(std::make_unique<HostCommunicator>(*this, group, r.rank, r.device,
                                                       static_cast<int>(local.size())));
  }
  return comms;
}

}  // namespace ard::gpu::testing
