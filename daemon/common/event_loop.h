// The daemon's control loop (DESIGN.md "Threads"): one thread that runs posted tasks, timers and
// file-descriptor callbacks (epoll). Whatever a component keeps "on the loop" is touched only from
// this thread, so it needs no locks: membership, jobs, negotiation state and the local sockets'
// sessions all live here, and a local frame is handled without a thread hop.
//
// Post/PostAfter may be called from any thread; WatchFd/UnwatchFd only on the loop thread (or
// before Start()).
// Lifecycle: 1. construct (no thread yet); 2. Start() spawns the named thread; 3. tasks and timers
// run in order of their due time (FIFO among equals), fd callbacks when epoll reports the fd;
// 4. Stop() (or the destructor) drops every task not yet run, forgets every watched fd (closing
// none) and joins the thread; later posts are dropped silently.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace ard {

class EventLoop {
 public:
  using Task = std::function<void()>;
  using FdCallback = std::function<void(uint32_t epoll_events)>;

  explicit EventLoop(std::string name);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  void Start();
  void Stop();

  // Runs `task` on the loop thread as soon as possible.
  void Post(Task task);
  // Runs `task` on the loop thread once `delay` has passed.
  void PostAfter(absl::Duration delay, Task task);

  // Calls `callback` on the loop thread whenever epoll reports `events` (EPOLLIN, EPOLLOUT, ...)
  // on `fd` (level-triggered). Watching an fd again replaces its events and callback.
  void WatchFd(int fd, uint32_t events, FdCallback callback);
  // Stops watching `fd` (call before closing it). Safe from inside that fd's own callback.
  void UnwatchFd(int fd);

  bool InLoopThread() const { return std::this_thread::get_id() == thread_id_; }

 private:
  struct Entry {
    absl::Time due;
    uint64_t seq;  // FIFO among tasks with the same due time
    Task task;
  };
  struct Later {
    bool operator()(const Entry& a, const Entry& b) const {
      return a.due != b.due ? a.due > b.due : a.seq > b.seq;
    }
  };

  void Run();
  void Wake();
  // Moves due tasks out of the queue; returns how long until the next one (or -1: none).
  int CollectDue(std::vector<Task>* due);

  const std::string name_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Post() from other threads wakes epoll_wait
  std::thread thread_;
  std::thread::id thread_id_;
  // Loop thread only: callbacks by fd; shared_ptr so a callback may unwatch itself while running.
  std::map<int, std::shared_ptr<FdCallback>> watched_;

  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::priority_queue<Entry, std::vector<Entry>, Later> queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ard
