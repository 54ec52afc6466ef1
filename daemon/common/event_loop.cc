#include "daemon/common/event_loop.h"

#include <pthread.h>

#include <utility>

namespace ard {

EventLoop::EventLoop(std::string name) : name_(std::move(name)) {}

EventLoop::~EventLoop() { Stop(); }

void EventLoop::Start() {
  absl::MutexLock lock(&mu_);
  if (running_ || stopped_) return;
  running_ = true;
  thread_ = std::thread([this] { Run(); });
  thread_id_ = thread_.get_id();
}

void EventLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  if (thread_.joinable() && !InLoopThread()) thread_.join();
  // Destroy dropped tasks outside mu_: their captures' destructors may call Post().
  std::priority_queue<Entry, std::vector<Entry>, Later> dropped;
  {
    absl::MutexLock lock(&mu_);
    std::swap(dropped, queue_);
  }
}

void EventLoop::Post(Task task) { PostAfter(absl::ZeroDuration(), std::move(task)); }

void EventLoop::PostAfter(absl::Duration delay, Task task) {
  absl::MutexLock lock(&mu_);
  if (stopped_) return;
  queue_.push(Entry{absl::Now() + delay, next_seq_++, std::move(task)});
}

void EventLoop::Run() {
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  for (;;) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        if (stopped_) return;
        if (queue_.empty()) {
          mu_.Await(absl::Condition(
              +[](EventLoop* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
                return self->stopped_ || !self->queue_.empty();
              },
              this));
          continue;
        }
        const absl::Time due = queue_.top().due;
        const absl::Time now = absl::Now();
        if (due <= now) break;
        // Wake when stopped, or when an entry due earlier than this one was posted meanwhile.
        std::pair<EventLoop*, absl::Time> arg{this, due};
        mu_.AwaitWithTimeout(
            absl::Condition(
                +[](std::pair<EventLoop*, absl::Time>* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                  EventLoop* self = a->first;
                  return self->stopped_ || self->queue_.top().due < a->second;
                },
                &arg),
            due - now);
      }
      task = std::move(const_cast<Entry&>(queue_.top()).task);
      queue_.pop();
    }
    task();
  }
}

}  // namespace ard
