// Session: who reads the daemon's frames (session.h, lifecycle step 2). One thread at a time holds
// the read role (read_mu_) and receives and handles frames in socket order, so RESULT_SEGMENT is
// always mapped before a COMPLETE that names it is located.
#include <algorithm>
#include <chrono>

#include "client/session.h"

namespace ard::client {
namespace {

// How long the receiver thread naps between looks at the socket while nobody reads it and no
// callback is in use: bounds how late a NOTIFY (elastic "hosts updated", a job's failure) is
// noticed by a process that is not waiting on a request.
constexpr int kParkMs = 20;

// After a spin that did not catch its answer, this many waits sleep at once before spinning is
// tried again: on a busy host, or with answers slower than the bound, spinning only burns CPU.
constexpr int kSkipsAfterMiss = 32;

}  // namespace

void Session::UseReceiver() {
  if (receiver_reads_.exchange(true)) return;
  WakeReceiver();
}

void Session::WakeReceiver() {
  { std::lock_guard<std::mutex> lock(park_mu_); }  // a napping receiver sees the change
  park_cv_.notify_all();
}

bool Session::ReadFrame(int timeout_ms) {
  if (read_done_) return false;
  try {
    Frame frame;
    Status status = connection_->Receive(timeout_ms, &frame);
    if (status.code() == wire::Code::kDeadlineExceeded) return false;
    if (status.ok()) status = HandleFrame(frame);
    if (status.ok()) return true;
    read_done_ = true;
    ReceiverExited();            // nothing more will be answered
    if (closing_) return false;  // the destructor cancels what is pending
    if (status.code() == wire::Code::kUnavailable) {
      FailAll(Unavailable(connection_->LostMessage()));
      return false;
    }
    FailAll(Internal("protocol error from allreduced daemon at " + config_.socket_path + ": " +
                     status.message()));
    connection_->Shutdown();
  } catch (...) {  // std::bad_alloc: give up on the connection rather than terminate TF
    read_done_ = true;
    ReceiverExited();
    connection_->Shutdown();
    try {
      FailAll(Internal("allreduced client ran out of memory reading the daemon's answers"));
    } catch (...) {
    }
  }
  return false;
}

void Session::ReceiveLoop() {
  while (!closing_ && !read_done_) {
    if (receiver_reads_) {
      std::lock_guard<std::mutex> role(read_mu_);  // released between frames: waiters may read
      if (ReadFrame(-1)) ++receiver_frames_;
      continue;
    }
    {
      std::unique_lock<std::mutex> lock(park_mu_);
      park_cv_.wait_for(lock, std::chrono::milliseconds(kParkMs),
                        [this] { return closing_ || receiver_reads_; });
    }
    std::unique_lock<std::mutex> role(read_mu_, std::try_to_lock);
    if (!role.owns_lock()) continue;  // a waiter reads
    while (ReadFrame(0)) ++receiver_frames_;
    role.unlock();
    requests_.Wake();  // a waiter that found the role taken may take it now
  }
}

bool Session::Spin(uint64_t handle, ard_result* out) {
  if (config_.wait_spin_us == 0) return false;
  if (spin_skips_ > 0) {
    --spin_skips_;
    return false;
  }
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::microseconds(config_.wait_spin_us);
  while (std::chrono::steady_clock::now() < end && !read_done_) {
    ReadFrame(0);
    if (requests_.Wait(handle, 0, out) != ARD_PENDING) {
      ++spin_answers_;
      return true;
    }
  }
  spin_skips_ = kSkipsAfterMiss;
  return false;
}

int Session::Wait(uint64_t handle, int timeout_ms, ard_result* out) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto left_ms = [&]() -> int {
    if (timeout_ms < 0) return -1;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return static_cast<int>(std::max<int64_t>(0, left.count()));
  };
  while (true) {
    int code = requests_.Wait(handle, 0, out);
    if (code != ARD_PENDING) return code;
    std::unique_lock<std::mutex> role(read_mu_, std::try_to_lock);
    if (role.owns_lock()) {
      // Read until this request is answered: its COMPLETE wakes this thread, no one else (or
      // finds it still spinning).
      Spin(handle, out);
      while (requests_.Wait(handle, 0, out) == ARD_PENDING) {
        const int left = left_ms();
        if (!ReadFrame(left) && (left == 0 || read_done_)) break;
      }
      role.unlock();
      requests_.Wake();  // other waiters: the socket is free
      return requests_.Wait(handle, 0, out);
    }
    // Another thread reads: wait for an answer, or for it to step aside (at most kParkMs, since
    // its Wake() may come between the try_lock above and this wait).
    const int left = left_ms();
    code = requests_.Wait(handle, left < 0 ? kParkMs : std::min(left, kParkMs), out,
                          /*once=*/true);
    if (code != ARD_PENDING || left == 0) return code;
  }
}

}  // namespace ard::client
