#include "client/request_table.h"

#include <chrono>
#include <cstring>
#include <utility>

namespace ard::client {

Status RequestTable::Add(uint64_t handle, ard_done_fn done, void* user,
                         const InputArena::Slot& slot) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.ok()) return failure_;
  auto record = std::make_unique<Record>();
  record->done = done;
  record->user = user;
  record->slot = slot;
  if (!records_.emplace(handle, std::move(record)).second) {
    return Internal("handle " + std::to_string(handle) + " is already in use");
  }
  ++pending_;
  return OkStatus();
}

bool RequestTable::Withdraw(uint64_t handle, InputArena::Slot* slot) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(handle);
  if (it == records_.end() || it->second->completed) return false;
  *slot = it->second->slot;
  records_.erase(it);
  --pending_;
  return true;
}

void RequestTable::Finish(uint64_t handle, Record* record, Outcome outcome, Finished* finished) {
  record->completed = true;
  record->outcome = std::move(outcome);
  record->message = record->outcome.status.message();
  --pending_;
  finished->handle = handle;
  finished->slot = record->slot;
  finished->done = record->done;
  finished->user = record->user;
  record->slot = InputArena::Slot();
  FillResult(*record, &finished->result);
}

bool RequestTable::TakeSlot(uint64_t handle, InputArena::Slot* slot) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(handle);
  if (it == records_.end() || it->second->completed) return false;
  *slot = it->second->slot;
  it->second->slot = InputArena::Slot();
  return true;
}

bool RequestTable::Complete(uint64_t handle, Outcome outcome, Finished* finished) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.find(handle);
    if (it == records_.end() || it->second->completed) return false;
    Finish(handle, it->second.get(), std::move(outcome), finished);
  }
  completed_cv_.notify_all();
  return true;
}

std::vector<Finished> RequestTable::FailAll(const Status& status, bool terminal) {
  std::vector<Finished> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (terminal && failure_.ok()) failure_ = status;
    for (auto& [handle, record] : records_) {
      if (record->completed) continue;
      Outcome outcome;
      outcome.status = status;
      finished.emplace_back();
      Finish(handle, record.get(), std::move(outcome), &finished.back());
    }
  }
  completed_cv_.notify_all();
  return finished;
}

int RequestTable::Wait(uint64_t handle, int timeout_ms, ard_result* out, bool once) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::unique_lock<std::mutex> lock(mu_);
  static const char kUnknown[] = "unknown, released or callback handle passed to ard_wait";
  static const char kTimedOut[] = "request still pending when ard_wait timed out";
  *out = ard_result{};
  bool timed_out = false, woken = false;
  while (true) {
    // Looked up afresh after every wake-up: another thread may have released it meanwhile.
    auto it = records_.find(handle);
    if (it == records_.end() || it->second->done != nullptr) {
      out->code = static_cast<int>(wire::Code::kInvalidArgument);
      out->message = kUnknown;
      return out->code;
    }
    if (it->second->completed) {
      FillResult(*it->second, out);
      return out->code;
    }
    if (timed_out || timeout_ms == 0 || (once && woken)) {  // 0: a poll, never a futex wait
      out->code = ARD_PENDING;
      out->message = kTimedOut;
      return out->code;
    }
    if (timeout_ms < 0) {
      completed_cv_.wait(lock);
    } else {
      timed_out = completed_cv_.wait_until(lock, deadline) == std::cv_status::timeout;
    }
    woken = true;
  }
}

bool RequestTable::Release(uint64_t handle, bool* send_release) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(handle);
  if (it == records_.end() || !it->second->completed) return false;
  *send_release = it->second->outcome.bytes > 0;
  records_.erase(it);
  return true;
}

void RequestTable::FillResult(const Record& record, ard_result* out) {
  const Outcome& o = record.outcome;
  *out = ard_result{};
  out->code = o.status.raw_code();
  out->message = record.message.c_str();
  out->ndims = o.ndims;
  std::memcpy(out->shape, o.shape, sizeof(o.shape));
  out->data = o.data;
  out->bytes = o.bytes;
  out->num_splits = static_cast<int>(o.splits.size());
  out->splits = o.splits.empty() ? nullptr : o.splits.data();
  out->join_last_rank = o.join_last_rank;
}

Status RequestTable::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

size_t RequestTable::pending_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_;
}

size_t RequestTable::record_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

}  // namespace ard::client
