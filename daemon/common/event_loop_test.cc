#include "daemon/common/event_loop.h"

#include <sys/epoll.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#include "absl/synchronization/notification.h"
#include "catch2/catch.hpp"

namespace ard {
namespace {

TEST_CASE("EventLoop runs posted tasks in order on its own thread") {
  EventLoop loop("test-loop");
  loop.Start();
  std::vector<int> seen;  // touched only on the loop thread until `done`
  absl::Notification done;
  bool on_loop = true;
  for (int i = 0; i < 100; ++i) {
    loop.Post([&, i] {
      on_loop = on_loop && loop.InLoopThread();
      seen.push_back(i);
      if (i == 99) done.Notify();
    });
  }
  REQUIRE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  REQUIRE(on_loop);
  REQUIRE(seen.size() == 100);
  for (int i = 0; i < 100; ++i) REQUIRE(seen[i] == i);
}

TEST_CASE("EventLoop runs an earlier timer posted after a later one first") {
  EventLoop loop("test-loop");
  loop.Start();
  std::vector<int> seen;
  absl::Notification done;
  loop.PostAfter(absl::Milliseconds(300), [&] {
    seen.push_back(2);
    done.Notify();
  });
  loop.PostAfter(absl::Milliseconds(10), [&] { seen.push_back(1); });
  REQUIRE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  REQUIRE(seen == std::vector<int>{1, 2});
}

TEST_CASE("EventLoop drops pending tasks at Stop and ignores later posts") {
  std::atomic<int> ran{0};
  auto loop = std::make_unique<EventLoop>("test-loop");
  loop->Start();
  loop->PostAfter(absl::Hours(1), [&] { ran++; });
  loop->Stop();
  loop->Post([&] { ran++; });
  loop.reset();
  REQUIRE(ran == 0);
}

TEST_CASE("EventLoop calls fd callbacks on the loop thread and stops after UnwatchFd") {
  EventLoop loop("test-loop");
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::atomic<int> calls{0};
  absl::Notification first;
  loop.Post([&] {
    loop.WatchFd(fds[0], EPOLLIN, [&](uint32_t) {
      char c;
      REQUIRE(read(fds[0], &c, 1) == 1);
      REQUIRE(loop.InLoopThread());
      if (++calls == 1) first.Notify();
      loop.UnwatchFd(fds[0]);  // from inside its own callback
    });
  });
  loop.Start();
  REQUIRE(write(fds[1], "ab", 2) == 2);
  REQUIRE(first.WaitForNotificationWithTimeout(absl::Seconds(10)));
  // The second byte stays unread: the fd is no longer watched.
  absl::Notification flushed;
  loop.Post([&] { flushed.Notify(); });
  REQUIRE(flushed.WaitForNotificationWithTimeout(absl::Seconds(10)));
  CHECK(calls == 1);
  loop.Stop();
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
}  // namespace ard
