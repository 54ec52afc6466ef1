// The header-only C++ wrapper (allreduced_client.hpp) against a fake daemon.
#include <vector>

#include "catch2/catch.hpp"
#include "client/allreduced_client.hpp"
#include "client/testing/client_test_util.h"
#include "client/testing/fake_daemon.h"

namespace ard::client::testing {
namespace {

TEST_CASE("ard::Client submits and a PendingResult releases on destruction") {
  FakeDaemon daemon;
  ard_options options = TestOptions(daemon);
  ard::Client client;
  ard::ClientStatus status = ard::Client::Create(&options, &client);
  INFO(status.ToString());
  REQUIRE(status.ok());
  CHECK(client.Topology().size == 1);
  FloatTensor t("w", {1, 2, 3});
  {
    ard::PendingResult pending;
    REQUIRE(client.Submit(t.request, &pending).ok());
    REQUIRE(pending.Wait() == ARD_OK);
    CHECK(pending.Ready());
    CHECK(IsDoubled(pending.result(), t.values));
    CHECK(pending.data<float>()[2] == 6.0f);
  }  // released here
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.releases.size() == 1; }));
  {
    ard::PendingResult never_waited;
    REQUIRE(client.Submit(t.request, &never_waited).ok());
  }  // waits for completion, then releases
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.releases.size() == 2; }));
  uint64_t handle = 0;
  REQUIRE(client.Submit(t.request, &handle).ok());
  ard_result r;
  REQUIRE(client.Wait(handle, -1, &r) == ARD_OK);
  client.Release(handle);
  ard::Client moved = std::move(client);
  CHECK_FALSE(client.valid());
  CHECK(moved.valid());
}

TEST_CASE("ard::Client::Create reports code and message; PendingResult sees PENDING") {
  ard_options options;
  ard_options_init(&options);
  options.socket_path = "/tmp/ard-wrapper-missing.sock";
  options.rank = options.size = options.local_rank = options.local_size = 0;
  options.size = options.local_size = 1;
  ard::Client client;
  ard::ClientStatus status = ard::Client::Create(&options, &client);
  CHECK(status.code == ARD_UNAVAILABLE);
  CHECK(status.message.find("/tmp/ard-wrapper-missing.sock") != std::string::npos);
  CHECK_FALSE(client.valid());

  FakeDaemonOptions fake;
  fake.hold_submits = true;
  FakeDaemon daemon(fake);
  ard_options good = TestOptions(daemon);
  REQUIRE(ard::Client::Create(&good, &client).ok());
  FloatTensor t("held", {1});
  ard::PendingResult pending;
  REQUIRE(client.Submit(t.request, &pending).ok());
  CHECK(pending.Wait(0) == ARD_PENDING);
  CHECK_FALSE(pending.Ready());
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.held.size() == 1; }));
  daemon.CompleteAllHeld();
  CHECK(pending.Wait() == ARD_OK);
  CHECK(pending.status().ok());
}

}  // namespace
}  // namespace ard::client::testing
