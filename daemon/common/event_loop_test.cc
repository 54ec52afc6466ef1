#include "daemon/common/event_loop.h"

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

}  // namespace
}  // namespace ard
