#include "daemon/local/session.h"

#include <unistd.h>

#include <cerrno>

#include "daemon/common/logging.h"
#include "daemon/local/frame_codec.h"
#include "daemon/local/seqpacket.h"

namespace ard::local {

Session::Session(int fd, PeerCredentials creds, uint64_t max_input_bytes,
                 std::function<void()> want_writable, size_t max_outbox_bytes)
    : input(max_input_bytes),
      last_activity(absl::Now()),
      fd_(fd),
      creds_(creds),
      want_writable_(std::move(want_writable)),
      max_outbox_bytes_(max_outbox_bytes) {}

Session::~Session() {
  Close();
  close(fd_);
}

bool Session::Send(const std::string& frame, int pass_fd) {
  bool wake = false;
  bool cut = false;
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || cut_off_) return false;
    if (outbox_.empty() && SendMessage(fd_, frame, pass_fd)) return true;
    if (outbox_.empty() && errno != EAGAIN && errno != EWOULDBLOCK) {
      cut_off_ = true;  // peer gone; the loop sees the hang-up
      peer_gone_ = true;
      return false;
    }
    if (outbox_bytes_ + frame.size() > max_outbox_bytes_) {
      // A client this far behind on reading its completions is cut off (its job fails): drop
      // what is queued, and have the loop close it now, even if it never sends another frame.
      cut_off_ = true;
      cut = true;
      for (Queued& q : outbox_) {
        if (q.fd >= 0) close(q.fd);
      }
      outbox_.clear();
      outbox_bytes_ = 0;
    } else {
      wake = outbox_.empty();
      outbox_.push_back(Queued{frame, pass_fd >= 0 ? dup(pass_fd) : -1});
      outbox_bytes_ += frame.size();
    }
  }
  if (wake || cut) want_writable_();
  return !cut;
}

bool Session::FlushOutbox() {
  absl::MutexLock lock(&mu_);
  while (!outbox_.empty() && !closed_) {
    Queued& q = outbox_.front();
    if (!SendMessage(fd_, q.frame, q.fd)) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return false;
      cut_off_ = true;
      peer_gone_ = true;
      break;
    }
    if (q.fd >= 0) close(q.fd);
    outbox_bytes_ -= q.frame.size();
    outbox_.pop_front();
  }
  for (Queued& q : outbox_) {
    if (q.fd >= 0) close(q.fd);
  }
  outbox_.clear();
  outbox_bytes_ = 0;
  return true;
}

void Session::Close() {
  std::map<uint64_t, std::shared_ptr<shm::ResultSlot>> held;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    for (Queued& q : outbox_) {
      if (q.fd >= 0) close(q.fd);
    }
    outbox_.clear();
    outbox_bytes_ = 0;
    held.swap(held_);
  }
  // `held` frees the result slots here, outside mu_.
}

bool Session::closed() const {
  absl::MutexLock lock(&mu_);
  return closed_;
}

bool Session::cut_off() const {
  absl::MutexLock lock(&mu_);
  return cut_off_;
}

bool Session::peer_gone() const {
  absl::MutexLock lock(&mu_);
  return peer_gone_;
}

bool Session::BeginRequest(uint64_t request_id, const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (in_flight_.count(request_id) || in_flight_names_.count(name) || held_.count(request_id)) {
    return false;
  }
  in_flight_[request_id] = name;
  in_flight_names_.insert(name);
  return true;
}

void Session::EndRequest(uint64_t request_id, std::shared_ptr<shm::ResultSlot> slot) {
  absl::MutexLock lock(&mu_);
  auto it = in_flight_.find(request_id);
  if (it != in_flight_.end()) {
    in_flight_names_.erase(it->second);
    in_flight_.erase(it);
  }
  if (slot != nullptr && !closed_) held_[request_id] = std::move(slot);
}

bool Session::Release(uint64_t request_id) {
  std::shared_ptr<shm::ResultSlot> slot;
  absl::MutexLock lock(&mu_);
  auto it = held_.find(request_id);
  if (it == held_.end()) return false;
  slot = std::move(it->second);
  held_.erase(it);
  return true;
}

size_t Session::held_results() const {
  absl::MutexLock lock(&mu_);
  return held_.size();
}

void Session::Reject(uint64_t request_id, const absl::Status& status) {
  Logger("local")->warn("rejected request pid={} job={} rank={} error=\"{}\"", creds_.pid,
                        job.empty() ? "-" : job, rank, status.message());
  Send(EncodeError(wire::MsgType::kError, request_id, static_cast<int32_t>(status.code()),
                   std::string(status.message())));
}

}  // namespace ard::local
