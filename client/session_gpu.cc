// Session's GPU path (ard_submit_device; DESIGN.md "GPU path", wire: local_wire.h "GPU path"):
// one GpuStaging per process, registered with the daemon on first use; each device submit takes a
// staging range and a pool event, copies its input in on the caller's stream and sends GPU_SUBMIT;
// its COMPLETE enqueues the copy-out on that stream before the callback runs. The host never
// waits for the GPU.
#include <chrono>
#include <cstring>

#include "client/request_codec.h"
#include "client/session.h"

namespace ard::client {

using wire::MsgType;

Status Session::RegisterGpu(int device) {
  std::unique_ptr<GpuStaging> staging;
  ARD_CLIENT_RETURN_IF_ERROR(
      GpuStaging::Create(device, config_.gpu_arena_bytes, config_.gpu_events, &staging));
  std::unique_lock<std::mutex> lock(gpu_mu_, std::adopt_lock);
  gpu_register_id_ = next_handle_.fetch_add(1);
  gpu_answered_ = false;
  UseReceiver();  // the answer and the device completions are read by the receiver thread
  const std::string& payload = staging->RegisterPayload();
  Status sent = connection_->Send(MsgType::kGpuRegister, gpu_register_id_, payload.data(),
                                  payload.size(), nullptr, 0);
  if (!sent.ok()) {
    lock.release();
    return sent;
  }
  auto answered = [this] { return gpu_answered_ || receiver_exited_; };
  if (config_.timeout_ms < 0) {
    gpu_cv_.wait(lock, answered);
  } else if (!gpu_cv_.wait_for(lock, std::chrono::milliseconds(config_.timeout_ms), answered)) {
    gpu_register_id_ = 0;
    lock.release();
    // The daemon may still open (and use) the handles it was sent: never freed (~Session).
    (void)staging.release();
    return Status(wire::Code::kDeadlineExceeded,
                  "GPU_REGISTER: no answer from the daemon within " +
                      std::to_string(config_.timeout_ms) +
                      " ms (every local rank of the job must register its GPU)");
  }
  gpu_register_id_ = 0;
  Status status = gpu_answered_ ? gpu_register_status_
                                : Unavailable("allreduced daemon at " + config_.socket_path +
                                              " closed the connection before answering "
                                              "GPU_REGISTER");
  if (!gpu_answered_) (void)staging.release();  // as above: the daemon may have opened it
  if (status.ok()) {
    gpu_ = std::move(staging);
    gpu_free_.clear();
    gpu_free_[0] = gpu_->arena_bytes();
    gpu_free_events_.clear();
    for (uint32_t e = gpu_->num_events(); e > 0; --e) gpu_free_events_.push_back(e - 1);
  }
  lock.release();  // the caller keeps holding gpu_mu_
  return status;
}

bool Session::HandleGpuReply(const Frame& frame, const Status& status) {
  std::lock_guard<std::mutex> lock(gpu_mu_);
  const uint64_t id = frame.header.request_id;
  if (id == 0 || (id != gpu_register_id_ && id != gpu_unregister_id_)) return false;
  gpu_register_status_ = status;
  gpu_answered_ = true;
  gpu_cv_.notify_all();
  return true;
}

void Session::ReceiverExited() {
  std::lock_guard<std::mutex> lock(gpu_mu_);
  receiver_exited_ = true;
  gpu_cv_.notify_all();
}

bool Session::UnregisterGpu() {
  std::unique_lock<std::mutex> lock(gpu_mu_);
  if (gpu_ == nullptr) return true;
  gpu_unregister_id_ = next_handle_.fetch_add(1);
  gpu_answered_ = false;
  if (!connection_->Send(MsgType::kGpuUnregister, gpu_unregister_id_, nullptr, 0).ok()) {
    return false;
  }
  auto answered = [this] { return gpu_answered_ || receiver_exited_; };
  if (config_.timeout_ms < 0) {
    gpu_cv_.wait(lock, answered);
  } else {
    gpu_cv_.wait_for(lock, std::chrono::milliseconds(config_.timeout_ms), answered);
  }
  gpu_unregister_id_ = 0;
  return gpu_answered_ && gpu_register_status_.ok();
}

Status Session::AllocateGpu(uint64_t bytes, GpuPending* pending) {
  if (bytes > gpu_->arena_bytes()) {
    return Status(wire::Code::kResourceExhausted,
                  "GPU staging arena (" + std::to_string(gpu_->arena_bytes()) +
                      " bytes, ALLREDUCED_GPU_ARENA_BYTES) cannot hold " + std::to_string(bytes) +
                      " bytes");
  }
  const uint64_t want =
      (bytes + wire::kSlotAlignment - 1) / wire::kSlotAlignment * wire::kSlotAlignment;
  if (gpu_free_events_.empty()) {
    return Status(wire::Code::kResourceExhausted,
                  "all " + std::to_string(gpu_->num_events()) +
                      " GPU pool events are in use by device submits in flight");
  }
  for (auto it = gpu_free_.begin(); it != gpu_free_.end(); ++it) {
    if (it->second < want) continue;
    pending->offset = it->first;
    pending->capacity = bytes;
    pending->reserved = want;
    if (it->second > want) gpu_free_[it->first + want] = it->second - want;
    gpu_free_.erase(it);
    pending->event = gpu_free_events_.back();
    gpu_free_events_.pop_back();
    return OkStatus();
  }
  return Status(wire::Code::kResourceExhausted,
                "GPU staging arena (" + std::to_string(gpu_->arena_bytes()) +
                    " bytes) has no free range of " + std::to_string(want) + " bytes");
}

Status Session::SubmitDevice(const ard_request& request, int device, void* device_out, void* stream,
                             ard_done_fn done, void* user, uint64_t* handle) {
  ARD_CLIENT_RETURN_IF_ERROR(ValidateRequest(request, max_tensor_bytes_));
  const auto collective = static_cast<wire::Collective>(request.collective);
  const bool served =
      collective == wire::Collective::kAllreduce || collective == wire::Collective::kBroadcast ||
      collective == wire::Collective::kAllgather || collective == wire::Collective::kReducescatter;
  if (!served || request.bytes == 0) {
    return Status(wire::Code::kInvalidArgument,
                  std::string("ard_submit_device: ") + request.name +
                      ": only allreduce, broadcast, allgather and reducescatter of a non-empty "
                      "tensor are served for device tensors");
  }
  // The staging range holds the input and then the result: allgather's is size times the input
  // (every rank's first dimension must be equal for device tensors).
  uint64_t capacity = request.bytes;
  if (collective == wire::Collective::kAllgather) {
    const uint64_t size = topology_.size > 0 ? static_cast<uint64_t>(topology_.size) : 1;
    if (request.bytes > UINT64_MAX / size) {
      return Status(wire::Code::kInvalidArgument, "ard_submit_device: allgather result too large");
    }
    capacity = request.bytes * size;
  }
  ARD_CLIENT_RETURN_IF_ERROR(requests_.failure());
  gpu_mu_.lock();
  if (gpu_ == nullptr) {
    Status registered = RegisterGpu(device);
    if (!registered.ok()) {
      gpu_mu_.unlock();
      return registered;
    }
  }
  if (device != gpu_->device()) {
    gpu_mu_.unlock();
    return Status(wire::Code::kInvalidArgument, "ard_submit_device: this process registered GPU " +
                                                    std::to_string(gpu_->device()) + ", not " +
                                                    std::to_string(device));
  }
  GpuPending pending;
  Status status = AllocateGpu(capacity, &pending);
  pending.bytes = request.bytes;
  pending.elem = wire::DataTypeSize(static_cast<uint32_t>(request.dtype));
  // A broadcast reads only the root's input: elsewhere the event is recorded without a copy. A
  // root whose output is its input (in place) needs no copy-out either.
  const bool broadcast = collective == wire::Collective::kBroadcast;
  const bool root = request.root_rank == topology_.rank;
  pending.skip_copy_out = broadcast && root && device_out == request.data;
  if (status.ok()) {
    status = gpu_->CopyIn(pending.offset, request.data, broadcast && !root ? 0 : request.bytes,
                          pending.event, stream);
    if (!status.ok()) {
      gpu_free_[pending.offset] = pending.reserved;
      gpu_free_events_.push_back(pending.event);
    }
  }
  const uint64_t id = next_handle_.fetch_add(1);
  if (status.ok()) {
    pending.out = device_out;
    pending.stream = stream;
    gpu_pending_[id] = pending;  // before the send: the answer finds it
  }
  gpu_mu_.unlock();
  ARD_CLIENT_RETURN_IF_ERROR(status);

  wire::Submit submit;
  EncodeSubmit(request, InputArena::Slot{}, &submit);
  wire::GpuPlacement placement{pending.offset, pending.event, 0};
  status = requests_.Add(id, done, user, InputArena::Slot{});
  if (status.ok()) {
    status = connection_->Send(MsgType::kGpuSubmit, id, &submit, sizeof(submit), &placement,
                               sizeof(placement));
    InputArena::Slot unused;
    if (status.ok() || !requests_.Withdraw(id, &unused)) {
      *handle = id;  // sent, or already completed by a concurrent terminal failure
      return OkStatus();
    }
  }
  Status not_sent = status;  // not OK: frees the range and event without a copy-out
  FinishGpu(id, &not_sent, nullptr);
  return status;
}

bool Session::FinishGpu(uint64_t id, Status* status, const wire::Complete* complete) {
  std::lock_guard<std::mutex> lock(gpu_mu_);
  auto it = gpu_pending_.find(id);
  if (it == gpu_pending_.end()) return false;
  const GpuPending p = it->second;
  gpu_pending_.erase(it);
  if (status->ok()) {
    uint64_t bytes = p.bytes;
    if (complete != nullptr) {  // allgather and reducescatter change the shape
      uint64_t elems = 1;
      bool valid = complete->ndims <= wire::kMaxDims;
      for (uint32_t d = 0; valid && d < complete->ndims; ++d) {
        const int64_t n = complete->shape[d];
        valid = n >= 0 && (n == 0 || elems <= p.capacity / static_cast<uint64_t>(n));
        if (valid) elems *= static_cast<uint64_t>(n);
      }
      valid = valid && elems <= p.capacity / (p.elem == 0 ? 1 : p.elem);
      bytes = elems * p.elem;
      if (!valid) {
        *status = Status(wire::Code::kInternal, "the daemon's result shape does not fit the " +
                                                    std::to_string(p.capacity) +
                                                    " bytes reserved for it");
      }
    }
    // The stream waits for the daemon's record of the event, then copies the result out (or only
    // waits: a later copy-in into this range must not overtake the daemon).
    if (status->ok() && bytes > 0) {
      *status = gpu_->CopyOut(p.offset, p.out, p.skip_copy_out ? 0 : bytes, p.event, p.stream);
    }
  }
  gpu_free_[p.offset] = p.reserved;
  gpu_free_events_.push_back(p.event);
  return true;
}

}  // namespace ard::client
