// The C API against a fake daemon over a real seqpacket socket: registration, submit/wait,
// callbacks, 8 threads at once, barrier and empty tensors, alltoall splits, RESULT_SEGMENT, wait
// timeouts and client-side validation. Shared memory: client_memory_test.cc.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"
#include "client/allreduced_client.h"
#include "client/testing/client_test_util.h"
#include "client/testing/fake_daemon.h"

namespace ard::client::testing {
namespace {

TEST_CASE("create registers with HELLO and reports WELCOME's topology") {
  FakeDaemonOptions options;
  options.welcome = {3, 8, 1, 2, 1, 4, 0, 0, 7, 0};
  FakeDaemon daemon(options);
  ard_options opts = TestOptions(daemon);
  opts.rank = 3;
  opts.size = 8;
  opts.local_rank = 1;
  opts.local_size = 2;
  ard_client* client = MustCreate(opts);
  ard_topology t;
  ard_client_topology(client, &t);
  CHECK(t.rank == 3);
  CHECK(t.size == 8);
  CHECK(t.local_rank == 1);
  CHECK(t.local_size == 2);
  CHECK(t.cross_rank == 1);
  CHECK(t.cross_size == 4);
  FakeDaemonState s = daemon.State();
  CHECK(s.hellos == 1);
  CHECK(std::string(s.hello.job) == "testjob");
  CHECK(std::string(ard_client_job(client)) == "testjob");
  CHECK(s.hello.rank == 3);
  CHECK(s.hello.size == 8);
  CHECK(s.hello.local_rank == 1);
  CHECK(s.hello.local_size == 2);
  CHECK(s.hello.segment_bytes == (1u << 20));
  CHECK(s.hello.pid == static_cast<uint32_t>(::getpid()));
  ard_client_destroy(client);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& st) { return st.byes == 1; }));
  CHECK(daemon.State().violations.empty());
}

TEST_CASE("submit and wait returns the result; release sends RELEASE") {
  FakeDaemon daemon;
  ard_client* client = MustCreate(TestOptions(daemon));
  FloatTensor t("grad/w", Ramp(1000, 1.5f));
  uint64_t handle = MustSubmit(client, t.request);
  CHECK(handle >= 1);
  ard_result r;
  REQUIRE(ard_wait(client, handle, kWaitMs, &r) == ARD_OK);
  CHECK(std::string(r.message).empty());
  CHECK(IsDoubled(r, t.values));
  // Waiting again before release gives the same result.
  ard_result again;
  REQUIRE(ard_wait(client, handle, 0, &again) == ARD_OK);
  CHECK(again.data == r.data);
  CHECK(daemon.State().releases.empty());
  ard_release(client, handle);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.releases.size() == 1; }));
  CHECK(daemon.State().releases[0] == handle);
  CHECK(ard_wait(client, handle, 0, &r) == ARD_INVALID_ARGUMENT);  // released
  ard_release(client, handle);                                     // no-op
  ard_client_destroy(client);
  FakeDaemonState s = daemon.State();
  CHECK(s.outstanding_results == 0);
  CHECK(s.violations.empty());
}

TEST_CASE("submit with a callback; release from inside the callback") {
  FakeDaemon daemon;
  ard_client* client = MustCreate(TestOptions(daemon));
  Collector collector;
  collector.release_from_callback = client;
  FloatTensor a("a", Ramp(16, 0)), b("b", Ramp(3, -7));
  uint64_t ha = MustSubmit(client, a.request, &Collector::Done, &collector);
  uint64_t hb = MustSubmit(client, b.request, &Collector::Done, &collector);
  REQUIRE(collector.WaitForCalls(2));
  for (auto [h, t] : {std::make_pair(ha, &a), std::make_pair(hb, &b)}) {
    Collector::Entry& e = collector.entries[h];
    CHECK(e.calls == 1);
    CHECK(e.code == ARD_OK);
    std::vector<float> out(t->values.size());
    std::memcpy(out.data(), e.data.data(), e.data.size());
    for (size_t i = 0; i < out.size(); ++i) CHECK(out[i] == 2 * t->values[i]);
  }
  ard_result r;
  CHECK(ard_wait(client, ha, 0, &r) == ARD_INVALID_ARGUMENT);  // callback handles are not waited
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.releases.size() == 2; }));
  ard_client_destroy(client);
  CHECK(daemon.State().violations.empty());
  CHECK(collector.total_calls == 2);
}

TEST_CASE("8 threads submit 1000 tensors each concurrently; every result is right") {
  FakeDaemon daemon;
  ard_options options = TestOptions(daemon);
  options.arena_segment_bytes = 64 << 10;  // small: growth happens under concurrency
  ard_client* client = MustCreate(options);
  constexpr int kThreads = 8, kPerThread = 1000, kWindow = 16;
  std::vector<int> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int base = 0; base < kPerThread; base += kWindow) {
        std::vector<std::unique_ptr<FloatTensor>> tensors;
        std::vector<uint64_t> handles;
        for (int i = base; i < std::min(base + kWindow, kPerThread); ++i) {
          size_t n = 1 + static_cast<size_t>((t * 7919 + i * 104729) % 2048);
          tensors.push_back(std::make_unique<FloatTensor>(
              "t" + std::to_string(t) + "/" + std::to_string(i), Ramp(n, float(t * 1000 + i))));
          uint64_t h = 0;
          if (ard_submit(client, &tensors.back()->request, nullptr, nullptr, &h, nullptr, 0) !=
              ARD_OK) {
            ++wrong[t];
          }
          handles.push_back(h);
        }
        for (size_t k = 0; k < handles.size(); ++k) {
          ard_result r;
          if (ard_wait(client, handles[k], kWaitMs, &r) != ARD_OK ||
              !IsDoubled(r, tensors[k]->values)) {
            ++wrong[t];
          }
          ard_release(client, handles[k]);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) CHECK(wrong[t] == 0);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) {
    return s.releases.size() == kThreads * kPerThread;
  }));
  FakeDaemonState s = daemon.State();
  CHECK(s.submits.size() == kThreads * kPerThread);
  CHECK(s.outstanding_results == 0);
  CHECK(s.violations.empty());  // among others: no SUBMIT overtook its ADD_SEGMENT
  std::vector<uint64_t> ids;
  for (auto& sub : s.submits) ids.push_back(sub.request_id);
  std::sort(ids.begin(), ids.end());
  CHECK(std::adjacent_find(ids.begin(), ids.end()) == ids.end());  // unique handles
  ard_client_destroy(client);
}

TEST_CASE("a 0-byte barrier needs no slot and no RELEASE") {
  FakeDaemon daemon;
  ard_client* client = MustCreate(TestOptions(daemon));
  ard_request barrier;
  ard_request_init(&barrier);
  barrier.collective = ARD_BARRIER;
  barrier.name = "barrier.0";
  uint64_t h = MustSubmit(client, barrier);
  ard_result r;
  REQUIRE(ard_wait(client, h, kWaitMs, &r) == ARD_OK);
  CHECK(r.bytes == 0);
  ard_release(client, h);
  int64_t zero[1] = {0};
  FloatTensor empty("empty", {});  // shape [0]: an empty tensor
  empty.request.shape = zero;
  h = MustSubmit(client, empty.request);
  REQUIRE(ard_wait(client, h, kWaitMs, &r) == ARD_OK);
  CHECK(r.bytes == 0);
  ard_release(client, h);
  FakeDaemonState s = daemon.State();
  REQUIRE(s.submits.size() == 2);
  for (auto& sub : s.submits) {
    CHECK(sub.submit.segment == 0);
    CHECK(sub.submit.offset == 0);
    CHECK(sub.submit.bytes == 0);
  }
  CHECK(s.releases.empty());
  ard_client_destroy(client);
}

TEST_CASE("misuse is rejected client-side with INVALID_ARGUMENT and nothing is sent") {
  FakeDaemon daemon;
  ard_client* client = MustCreate(TestOptions(daemon));
  FloatTensor t("x", Ramp(4, 0));
  std::string long_name(300, 'n');
  int64_t bad_shape[1] = {5};
  std::vector<std::function<void(ard_request&)>> misuses = {
      [](ard_request& r) { r.name = ""; },
      [](ard_request& r) { r.name = nullptr; },
      [&](ard_request& r) { r.name = long_name.c_str(); },
      [](ard_request& r) { r.ndims = 9; },
      [&](ard_request& r) { r.shape = bad_shape; },  // 5 floats != 16 bytes
      [](ard_request& r) { r.bytes = 12; },
      [](ard_request& r) { r.data = nullptr; },
      [](ard_request& r) { r.dtype = 99; },
      [](ard_request& r) { r.collective = 42; },
      [](ard_request& r) { r.reduce_op = 0; },
      [](ard_request& r) { r.group_id = -2; },
      [](ard_request& r) { r.num_splits = 2; },  // splits on an allreduce
  };
  for (size_t i = 0; i < misuses.size(); ++i) {
    ard_request r = t.request;
    misuses[i](r);
    char err[512] = "";
    uint64_t h = 0;
    INFO("misuse " << i);
    CHECK(ard_submit(client, &r, nullptr, nullptr, &h, err, sizeof(err)) ==
          ARD_INVALID_ARGUMENT);
    CHECK(std::strlen(err) > 0);
  }
  char err[8];
  uint64_t h;
  CHECK(ard_submit(client, nullptr, nullptr, nullptr, &h, err, sizeof(err)) ==
        ARD_INVALID_ARGUMENT);
  CHECK(std::strlen(err) == 7);  // truncated to the buffer
  h = MustSubmit(client, t.request);  // a valid one still works
  ard_result r;
  REQUIRE(ard_wait(client, h, kWaitMs, &r) == ARD_OK);
  ard_release(client, h);
  CHECK(daemon.State().submits.size() == 1);
  ard_client_destroy(client);
}

TEST_CASE("alltoall splits travel both ways; results may live in a RESULT_SEGMENT") {
  FakeDaemon daemon;
  ard_client* client = MustCreate(TestOptions(daemon));
  daemon.AddResultSegment(1 << 20);  // the fake then places results in segment 1
  FloatTensor t("a2a", Ramp(6, 0));
  int64_t splits[3] = {1, 2, 3};
  t.request.collective = ARD_ALLTOALL;
  t.request.num_splits = 3;
  t.request.splits = splits;
  uint64_t h = MustSubmit(client, t.request);
  ard_result r;
  REQUIRE(ard_wait(client, h, kWaitMs, &r) == ARD_OK);
  REQUIRE(r.num_splits == 3);
  CHECK(std::vector<int64_t>(r.splits, r.splits + 3) == std::vector<int64_t>{1, 2, 3});
  CHECK(std::memcmp(r.data, t.values.data(), r.bytes) == 0);  // copied, not doubled
  ard_release(client, h);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.outstanding_results == 0; }));
  ard_client_destroy(client);
  CHECK(daemon.State().violations.empty());
}

TEST_CASE("ard_wait with a timeout reports PENDING until the request completes") {
  FakeDaemonOptions fake;
  fake.hold_submits = true;
  FakeDaemon daemon(fake);
  ard_client* client = MustCreate(TestOptions(daemon));
  FloatTensor t("slow", Ramp(8, 0));
  uint64_t h = MustSubmit(client, t.request);
  ard_result r;
  CHECK(ard_wait(client, h, 0, &r) == ARD_PENDING);
  CHECK(ard_wait(client, h, 20, &r) == ARD_PENDING);
  CHECK(ard_wait(client, h + 100, 0, &r) == ARD_INVALID_ARGUMENT);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.held.size() == 1; }));
  daemon.CompleteAllHeld();
  REQUIRE(ard_wait(client, h, 10000, &r) == ARD_OK);
  CHECK(IsDoubled(r, t.values));
  ard_release(client, h);
  ard_client_destroy(client);
}

TEST_CASE("ard_code_name uses absl's names") {
  CHECK(std::string(ard_code_name(ARD_OK)) == "OK");
  CHECK(std::string(ard_code_name(ARD_RESOURCE_EXHAUSTED)) == "RESOURCE_EXHAUSTED");
  CHECK(std::string(ard_code_name(ARD_UNAVAILABLE)) == "UNAVAILABLE");
  CHECK(std::string(ard_code_name(ARD_PENDING)) == "PENDING");
  CHECK(std::string(ard_code_name(1234)) == "UNKNOWN");
}

}  // namespace
}  // namespace ard::client::testing
