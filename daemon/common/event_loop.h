// A single-threaded task loop with timers: the daemon's control loop (DESIGN.md "Threads").
// Whatever state a component keeps "on the loop" is touched only by tasks run here, so it needs
// no locks. Post/PostAfter may be called from any thread.
//
// Lifecycle: 1. construct (no thread yet); 2. Start() spawns the named thread; 3. tasks and timers
// run in order of their due time (FIFO among equals); 4. Stop() (or the destructor) drops every task
// not yet run and joins the thread; later posts are dropped silently.
#pragma once

#include <cstdint>
#include <functional>
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

  const std::string name_;
  std::thread thread_;
  std::thread::id thread_id_;
  absl::Mutex mu_;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::priority_queue<Entry, std::vector<Entry>, Later> queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ard
