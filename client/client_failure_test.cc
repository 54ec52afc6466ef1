// The C API's failure paths against a fake daemon: create errors, ERROR for one request, failed
// COMPLETE, NOTIFY, the daemon closing the socket, and destroy with requests pending.
#include <cstring>
#include <string>

#include "catch2/catch.hpp"
#include "client/allreduced_client.h"
#include "client/testing/client_test_util.h"
#include "client/testing/fake_daemon.h"

namespace ard::client::testing {
namespace {

constexpr int32_t kAborted = static_cast<int32_t>(wire::Code::kAborted);
constexpr int32_t kFailedPrecondition = static_cast<int32_t>(wire::Code::kFailedPrecondition);

FakeDaemonOptions Holding() {
  FakeDaemonOptions options;
  options.hold_submits = true;
  return options;
}

int Submit(ard_client* client, const ard_request& request, uint64_t* handle, std::string* err,
           ard_done_fn done = nullptr, void* user = nullptr) {
  char buf[512] = "";
  int code = ard_submit(client, &request, done, user, handle, buf, sizeof(buf));
  *err = buf;
  return code;
}

TEST_CASE("create fails clearly when no daemon listens") {
  ard_options options;
  ard_options_init(&options);
  options.socket_path = "/tmp/ard-no-such-daemon.sock";
  options.rank = options.size = -1;
  char err[512] = "";
  ard_client* client = reinterpret_cast<ard_client*>(0x1);
  CHECK(ard_client_create(&options, &client, err, sizeof(err)) == ARD_UNAVAILABLE);
  CHECK(client == nullptr);
  CHECK(std::string(err).find("/tmp/ard-no-such-daemon.sock") != std::string::npos);
}

TEST_CASE("create returns the daemon's ERROR for HELLO") {
  FakeDaemonOptions fake;
  fake.hello_reply = FakeDaemonOptions::HelloReply::kError;
  fake.hello_error_message = "job 'testjob' expects 4 ranks, rank 7 is out of range";
  FakeDaemon daemon(fake);
  char err[512] = "";
  ard_client* client = nullptr;
  ard_options options = TestOptions(daemon);
  CHECK(ard_client_create(&options, &client, err, sizeof(err)) == ARD_FAILED_PRECONDITION);
  CHECK(std::string(err) == fake.hello_error_message);
  CHECK(client == nullptr);
}

TEST_CASE("create times out when the job does not form") {
  FakeDaemonOptions fake;
  fake.hello_reply = FakeDaemonOptions::HelloReply::kSilent;
  FakeDaemon daemon(fake);
  ard_options options = TestOptions(daemon);
  options.timeout_ms = 100;
  char err[512] = "";
  ard_client* client = nullptr;
  CHECK(ard_client_create(&options, &client, err, sizeof(err)) == ARD_DEADLINE_EXCEEDED);
  CHECK(std::string(err).find("job 'testjob' (from ard_options.job) did not form within 100 ms") !=
        std::string::npos);
  // The abandoned connection says goodbye.
  CHECK(daemon.WaitFor([](const FakeDaemonState& s) { return s.disconnects == 1; }));
}

TEST_CASE("create rejects a bad job name before connecting") {
  FakeDaemon daemon;
  ard_options options = TestOptions(daemon);
  options.job = "no spaces/please";
  char err[512] = "";
  ard_client* client = nullptr;
  CHECK(ard_client_create(&options, &client, err, sizeof(err)) == ARD_INVALID_ARGUMENT);
  CHECK(daemon.State().connections == 0);
}

TEST_CASE("create refuses a rank of a multi-rank job that no name identifies") {
  FakeDaemon daemon;
  ard_options options = TestOptions(daemon);
  options.job = nullptr;  // and the test's environment sets neither ALLREDUCED_JOB nor a launcher
  options.rank = options.local_rank = 1;
  options.size = options.local_size = 2;
  char err[512] = "";
  ard_client* client = nullptr;
  CHECK(ard_client_create(&options, &client, err, sizeof(err)) == ARD_INVALID_ARGUMENT);
  CHECK(std::string(err).find("set ALLREDUCED_JOB") != std::string::npos);
  CHECK(client == nullptr);
  CHECK(daemon.State().connections == 0);
  // Alone in its job, the same process keeps the default name.
  options.rank = options.local_rank = 0;
  options.size = options.local_size = 1;
  client = MustCreate(options);
  CHECK(std::string(ard_client_job(client)) == "default");
  CHECK(std::string(daemon.State().hello.job) == "default");
  ard_client_destroy(client);
}

TEST_CASE("ERROR for one request fails only that request") {
  FakeDaemon daemon(Holding());
  ard_client* client = MustCreate(TestOptions(daemon));
  FloatTensor a("a", {1, 2}), b("b", {3, 4});
  uint64_t ha = 0, hb = 0;
  std::string err;
  REQUIRE(Submit(client, a.request, &ha, &err) == ARD_OK);
  REQUIRE(Submit(client, b.request, &hb, &err) == ARD_OK);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.held.size() == 2; }));
  const std::string message =
      "Mismatched ALLREDUCE tensor shapes: One rank sent a tensor of shape [2], but another rank "
      "sent a tensor of shape [3].";
  daemon.SendError(ha, kFailedPrecondition, message);
  ard_result r;
  REQUIRE(ard_wait(client, ha, kWaitMs, &r) == ARD_FAILED_PRECONDITION);
  CHECK(std::string(r.message) == message);
  CHECK(r.bytes == 0);
  CHECK(ard_wait(client, hb, 0, &r) == ARD_PENDING);
  REQUIRE(daemon.CompleteHeld(hb));
  REQUIRE(ard_wait(client, hb, kWaitMs, &r) == ARD_OK);
  CHECK(IsDoubled(r, b.values));
  ard_release(client, ha);  // no result slot: no RELEASE frame
  ard_release(client, hb);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.releases.size() == 1; }));
  CHECK(daemon.State().releases[0] == hb);
  // A COMPLETE carrying an error code fails its request the same way.
  uint64_t hc = 0;
  REQUIRE(Submit(client, a.request, &hc, &err) == ARD_OK);
  daemon.SendFailedComplete(hc, static_cast<int32_t>(wire::Code::kInvalidArgument), "bad dtype");
  REQUIRE(ard_wait(client, hc, kWaitMs, &r) == ARD_INVALID_ARGUMENT);
  CHECK(std::string(r.message) == "bad dtype");
  ard_release(client, hc);
  ard_client_destroy(client);
}

TEST_CASE("NOTIFY fails pending requests and every later submit") {
  FakeDaemon daemon(Holding());
  ard_client* client = MustCreate(TestOptions(daemon));
  Collector collector;
  FloatTensor a("a", {1}), b("b", {2});
  uint64_t ha = 0, hb = 0;
  std::string err;
  REQUIRE(Submit(client, a.request, &ha, &err) == ARD_OK);
  REQUIRE(Submit(client, b.request, &hb, &err, &Collector::Done, &collector) == ARD_OK);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.held.size() == 2; }));
  const std::string message = "job testjob aborted: rank 3 on host b died";
  daemon.SendNotify(kAborted, message);
  ard_result r;
  REQUIRE(ard_wait(client, ha, kWaitMs, &r) == ARD_ABORTED);
  CHECK(std::string(r.message) == message);
  REQUIRE(collector.WaitForCalls(1));
  CHECK(collector.entries[hb].code == ARD_ABORTED);
  CHECK(collector.entries[hb].message == message);
  uint64_t hc = 0;
  CHECK(Submit(client, a.request, &hc, &err) == ARD_ABORTED);
  CHECK(err == message);
  // A late COMPLETE for a request already failed locally frees the daemon's slot at once.
  daemon.CompleteAllHeld();
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.releases.size() == 2; }));
  ard_release(client, ha);
  ard_release(client, hb);
  ard_client_destroy(client);
  CHECK(collector.total_calls == 1);
  CHECK(daemon.State().outstanding_results == 0);
}

TEST_CASE("the daemon closing the socket fails pending requests with UNAVAILABLE") {
  FakeDaemon daemon(Holding());
  ard_client* client = MustCreate(TestOptions(daemon));
  Collector collector;
  FloatTensor a("a", {1}), b("b", {2});
  uint64_t ha = 0, hb = 0;
  std::string err;
  REQUIRE(Submit(client, a.request, &ha, &err) == ARD_OK);
  REQUIRE(Submit(client, b.request, &hb, &err, &Collector::Done, &collector) == ARD_OK);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.held.size() == 2; }));
  daemon.CloseConnections();
  const std::string expected = "lost connection to allreduced daemon at " + daemon.socket_path();
  ard_result r;
  REQUIRE(ard_wait(client, ha, kWaitMs, &r) == ARD_UNAVAILABLE);
  CHECK(std::string(r.message) == expected);
  REQUIRE(collector.WaitForCalls(1));
  CHECK(collector.entries[hb].code == ARD_UNAVAILABLE);
  uint64_t hc = 0;
  CHECK(Submit(client, a.request, &hc, &err) == ARD_UNAVAILABLE);
  CHECK(err == expected);
  ard_release(client, ha);
  ard_release(client, hb);
  ard_client_destroy(client);
  CHECK(collector.total_calls == 1);
}

TEST_CASE("destroy cancels pending requests; each callback runs once") {
  FakeDaemon daemon(Holding());
  ard_client* client = MustCreate(TestOptions(daemon));
  Collector collector;
  FloatTensor a("a", {1}), b("b", {2}), c("c", {3});
  uint64_t handles[3];
  std::string err;
  REQUIRE(Submit(client, a.request, &handles[0], &err, &Collector::Done, &collector) == ARD_OK);
  REQUIRE(Submit(client, b.request, &handles[1], &err, &Collector::Done, &collector) == ARD_OK);
  REQUIRE(Submit(client, c.request, &handles[2], &err) == ARD_OK);  // waited, never waited on
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.held.size() == 3; }));
  ard_client_destroy(client);
  CHECK(collector.total_calls == 2);
  for (int i = 0; i < 2; ++i) {
    CHECK(collector.entries[handles[i]].calls == 1);
    CHECK(collector.entries[handles[i]].code == ARD_CANCELLED);
  }
  CHECK(daemon.WaitFor([](const FakeDaemonState& s) { return s.byes == 1; }));
}

TEST_CASE("an ERROR that names no request fails the client") {
  FakeDaemon daemon(Holding());
  ard_client* client = MustCreate(TestOptions(daemon));
  FloatTensor a("a", {1});
  uint64_t ha = 0;
  std::string err;
  REQUIRE(Submit(client, a.request, &ha, &err) == ARD_OK);
  daemon.SendError(0, static_cast<int32_t>(wire::Code::kInvalidArgument), "bad ADD_SEGMENT");
  ard_result r;
  REQUIRE(ard_wait(client, ha, kWaitMs, &r) == ARD_INVALID_ARGUMENT);
  CHECK(std::string(r.message) == "bad ADD_SEGMENT");
  uint64_t hb = 0;
  CHECK(Submit(client, a.request, &hb, &err) == ARD_INVALID_ARGUMENT);
  ard_release(client, ha);
  ard_client_destroy(client);
}

}  // namespace
}  // namespace ard::client::testing
