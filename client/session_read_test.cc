// Who reads the daemon's answers (session_read.cc): a thread waiting on its request reads the
// answer itself (no hand-off from the receiver thread), several waiters and callbacks share the
// socket without losing or reordering an answer, and callbacks turn the receiver thread on.
// Counted in frames read by the receiver thread, not in time.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"
#include "client/allreduced_client.h"
#include "client/config.h"
#include "client/env_ranks.h"
#include "client/session.h"
#include "client/testing/client_test_util.h"
#include "client/testing/fake_daemon.h"

namespace ard::client::testing {
namespace {

std::unique_ptr<Session> MustCreateSession(const FakeDaemon& daemon, uint64_t spin_us = 0) {
  ClientConfig config;
  REQUIRE(ResolveConfig(TestOptions(daemon), ProcessEnv(), &config).ok());
  config.wait_spin_us = spin_us;
  std::unique_ptr<Session> session;
  Status status = Session::Create(config, &session);
  INFO(status.message());
  REQUIRE(status.ok());
  return session;
}

// Submits a float tensor named `name` and waits for 2 x its values; false on any failure.
bool RoundTrip(Session& session, const std::string& name, float start) {
  FloatTensor t(name, Ramp(64, start));
  uint64_t handle = 0;
  if (!session.Submit(t.request, nullptr, nullptr, &handle).ok()) return false;
  ard_result result;
  if (session.Wait(handle, kWaitMs, &result) != ARD_OK) return false;
  bool doubled = IsDoubled(result, t.values);
  session.Release(handle);
  return doubled;
}

TEST_CASE("a thread waiting on its request reads the answer itself") {
  FakeDaemon daemon;
  std::unique_ptr<Session> session = MustCreateSession(daemon);
  constexpr int kRequests = 300;
  for (int i = 0; i < kRequests; ++i) {
    REQUIRE(RoundTrip(*session, "t" + std::to_string(i), static_cast<float>(i)));
  }
  // The receiver thread only looks at the socket every few ms while nobody waits, and each
  // answer here arrives while its submitter waits: it reads (next to) none of them.
  CHECK(session->receiver_frames() < kRequests / 2);
}

TEST_CASE("a waiting thread spins only when configured, and catches quick answers") {
  FakeDaemon daemon;
  std::unique_ptr<Session> off = MustCreateSession(daemon);
  std::unique_ptr<Session> on = MustCreateSession(daemon, 10000);  // the fake answers at once
  for (int i = 0; i < 50; ++i) {
    REQUIRE(RoundTrip(*off, "off" + std::to_string(i), static_cast<float>(i)));
    REQUIRE(RoundTrip(*on, "on" + std::to_string(i), static_cast<float>(i)));
  }
  CHECK(off->spin_answers() == 0);
  CHECK(on->spin_answers() > 0);
}

TEST_CASE("waiters on several threads and callbacks share the socket") {
  FakeDaemon daemon;
  std::unique_ptr<Session> session = MustCreateSession(daemon);
  constexpr int kThreads = 4, kEach = 100;
  std::vector<std::thread> threads;
  std::vector<int> ok(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        ok[t] += RoundTrip(*session, "w" + std::to_string(t) + "." + std::to_string(i),
                           static_cast<float>(t * 1000 + i));
      }
    });
  }
  Collector collector;
  std::vector<std::unique_ptr<FloatTensor>> async;
  for (int i = 0; i < kEach; ++i) {
    async.push_back(std::make_unique<FloatTensor>("cb" + std::to_string(i), Ramp(16, i)));
    uint64_t handle = 0;
    REQUIRE(session->Submit(async.back()->request, &Collector::Done, &collector, &handle).ok());
  }
  for (std::thread& t : threads) t.join();
  REQUIRE(collector.WaitForCalls(kEach));
  for (int t = 0; t < kThreads; ++t) CHECK(ok[t] == kEach);
  std::lock_guard<std::mutex> lock(collector.mu);
  for (auto& [handle, entry] : collector.entries) {
    CHECK(entry.calls == 1);
    CHECK(entry.code == ARD_OK);
    session->Release(handle);
  }
  CHECK(session->receiver_frames() > 0);  // callbacks in use: the receiver thread reads
}

}  // namespace
}  // namespace ard::client::testing
