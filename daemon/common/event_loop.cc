#include "daemon/common/event_loop.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "daemon/common/status_macros.h"

namespace ard {

EventLoop::EventLoop(std::string name) : name_(std::move(name)) {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ARD_CHECK(epoll_fd_ >= 0 && wake_fd_ >= 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  ARD_CHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev) == 0);
}

EventLoop::~EventLoop() {
  Stop();
  close(epoll_fd_);
  close(wake_fd_);
}

void EventLoop::Start() {
  absl::MutexLock lock(&mu_);
  if (started_ || stopped_) return;
  started_ = true;
  thread_ = std::thread([this] { Run(); });
  thread_id_ = thread_.get_id();
}

void EventLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  // Destroy dropped tasks outside mu_: their captures' destructors may call Post().
  std::priority_queue<Entry, std::vector<Entry>, Later> dropped;
  {
    absl::MutexLock lock(&mu_);
    std::swap(dropped, queue_);
  }
  for (const auto& [fd, cb] : watched_) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  watched_.clear();
}

void EventLoop::Post(Task task) { PostAfter(absl::ZeroDuration(), std::move(task)); }

void EventLoop::PostAfter(absl::Duration delay, Task task) {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    queue_.push(Entry{absl::Now() + delay, next_seq_++, std::move(task)});
  }
  if (!InLoopThread()) Wake();
}

void EventLoop::Wake() {
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void EventLoop::WatchFd(int fd, uint32_t events, FdCallback callback) {
  epoll_event ev{};
  ev.events = events;
  ev.data.fd = fd;
  const bool known = watched_.count(fd) != 0;
  watched_[fd] = std::make_shared<FdCallback>(std::move(callback));
  ARD_CHECK(epoll_ctl(epoll_fd_, known ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) == 0);
}

void EventLoop::UnwatchFd(int fd) {
  if (watched_.erase(fd) != 0) epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

int EventLoop::CollectDue(std::vector<Task>* due) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = absl::Now();
  while (!queue_.empty() && queue_.top().due <= now) {
    due->push_back(std::move(const_cast<Entry&>(queue_.top()).task));
    queue_.pop();
  }
  if (queue_.empty()) return -1;
  // Round up so a timer never fires early and spins.
  return static_cast<int>(absl::ToInt64Milliseconds(queue_.top().due - now + absl::Microseconds(999)));
}

void EventLoop::Run() {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  std::vector<Task> due;
  epoll_event events[64];
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return;
    }
    due.clear();
    const int timeout_ms = CollectDue(&due);
    for (Task& task : due) task();
    if (!due.empty()) continue;  // tasks may have posted more work that is due now
    const int n = epoll_wait(epoll_fd_, events, 64, timeout_ms);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t count;
        (void)!read(wake_fd_, &count, sizeof(count));
        continue;
      }
      auto it = watched_.find(fd);
      if (it == watched_.end()) continue;  // unwatched by an earlier callback in this batch
      std::shared_ptr<FdCallback> callback = it->second;
      (*callback)(events[i].events);
    }
  }
}

}  // namespace ard
