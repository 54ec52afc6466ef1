// Tensors built in shared memory (ard_alloc): the buffer bookkeeping over a real input arena, and
// through the C API against the fake daemon, that such a tensor reaches the daemon where the
// caller built it (no copy: counted by the session and seen in the SUBMIT's arena offset).
#include "client/shared_buffers.h"

#include <cstring>
#include <memory>
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

std::unique_ptr<InputArena> MakeArena() {
  std::unique_ptr<InputArena> arena;
  Status status = InputArena::Create(
      64 << 10, 1 << 20, [](uint32_t, int, uint64_t) { return OkStatus(); }, &arena);
  REQUIRE(status.ok());
  return arena;
}

TEST_CASE("a shared buffer is used at aligned offsets and returned after its last use") {
  auto arena = MakeArena();
  SharedBuffers buffers(*arena);
  void* data = nullptr;
  REQUIRE(buffers.Allocate(1000, &data).ok());
  char* p = static_cast<char*>(data);
  const uint64_t free_before = arena->free_bytes();

  InputArena::Slot a, b, c;
  REQUIRE(buffers.BeginUse(p, 1000, &a));       // the whole buffer
  REQUIRE(buffers.BeginUse(p + 128, 512, &b));  // a tensor packed at an aligned offset
  CHECK(b.offset == a.offset + 128);
  CHECK(b.segment == a.segment);
  CHECK(a.bytes == 0);                              // InputArena::Free ignores it
  CHECK_FALSE(buffers.BeginUse(p + 4, 16, &c));     // not 64-byte aligned: copied instead
  CHECK_FALSE(buffers.BeginUse(p + 64, 1024, &c));  // runs past the end
  std::vector<char> elsewhere(64);
  CHECK_FALSE(buffers.BeginUse(elsewhere.data(), 64, &c));

  REQUIRE(buffers.Free(data).ok());  // two uses pending: kept
  CHECK(arena->free_bytes() == free_before);
  CHECK_FALSE(buffers.BeginUse(p, 64, &c));  // freed: no new uses
  CHECK(buffers.Free(data).code() == wire::Code::kInvalidArgument);
  CHECK(buffers.EndUse(a));
  CHECK(buffers.live_count() == 1);
  CHECK(buffers.EndUse(b));
  CHECK(buffers.live_count() == 0);
  CHECK(arena->free_bytes() == free_before + 1024);
  CHECK_FALSE(buffers.EndUse(InputArena::Slot{}));  // an ordinary (empty) slot
}

TEST_CASE("ard_free refuses memory that is not a live buffer") {
  FakeDaemon daemon;
  ard_client* client = MustCreate(TestOptions(daemon));
  char err[256] = "";
  int x = 0;
  CHECK(ard_free(client, &x, err, sizeof(err)) == ARD_INVALID_ARGUMENT);
  void* data = nullptr;
  CHECK(ard_alloc(client, 0, &data, err, sizeof(err)) == ARD_INVALID_ARGUMENT);
  REQUIRE(ard_alloc(client, 256, &data, err, sizeof(err)) == ARD_OK);
  CHECK(ard_free(client, data, err, sizeof(err)) == ARD_OK);
  CHECK(ard_free(client, data, err, sizeof(err)) == ARD_INVALID_ARGUMENT);
  ard_client_destroy(client);
}

std::unique_ptr<Session> MustCreateSession(const FakeDaemon& daemon) {
  ClientConfig config;
  REQUIRE(ResolveConfig(TestOptions(daemon), ProcessEnv(), &config).ok());
  std::unique_ptr<Session> session;
  Status status = Session::Create(config, &session);
  INFO(status.message());
  REQUIRE(status.ok());
  return session;
}

// Submits `t` through `session` and waits for its result.
ard_result SubmitAndWait(Session& session, const FloatTensor& t, uint64_t* handle) {
  REQUIRE(session.Submit(t.request, nullptr, nullptr, handle).ok());
  ard_result result;
  REQUIRE(session.Wait(*handle, kWaitMs, &result) == ARD_OK);
  return result;
}

TEST_CASE("a tensor built in a shared buffer is submitted without a copy") {
  FakeDaemon daemon;
  std::unique_ptr<Session> session = MustCreateSession(daemon);
  const std::vector<float> values = Ramp(4096, 3);  // 16 KiB
  const uint64_t bytes = values.size() * sizeof(float);

  FloatTensor copied("copied", values);
  uint64_t h1 = 0;
  ard_result r1 = SubmitAndWait(*session, copied, &h1);
  CHECK(IsDoubled(r1, values));
  CHECK(session->copied_input_bytes() == bytes);  // the ordinary path: one copy of the input
  session->Release(h1);

  void* data = nullptr;
  REQUIRE(session->Allocate(2 * bytes, &data).ok());
  FloatTensor built("built", values), second("second", values);
  std::memcpy(data, values.data(), bytes);  // the caller builds its tensors in place
  std::memcpy(static_cast<char*>(data) + bytes, values.data(), bytes);
  built.request.data = data;
  second.request.data = static_cast<char*>(data) + bytes;
  uint64_t h2 = 0, h3 = 0;
  ard_result r2 = SubmitAndWait(*session, built, &h2);
  ard_result r3 = SubmitAndWait(*session, second, &h3);
  CHECK(IsDoubled(r2, values));
  CHECK(IsDoubled(r3, values));
  CHECK(session->copied_input_bytes() == bytes);  // unchanged: nothing copied for either

  std::vector<ReceivedSubmit> submits = daemon.State().submits;
  REQUIRE(submits.size() == 3);
  CHECK(submits[2].submit.segment == submits[1].submit.segment);
  CHECK(submits[2].submit.offset == submits[1].submit.offset + bytes);  // where it was built
  session->Release(h2);
  session->Release(h3);
  REQUIRE(session->Free(data).ok());
}

TEST_CASE("a shared buffer freed while a submit reads it stays reserved until completion") {
  FakeDaemonOptions options;
  options.hold_submits = true;
  FakeDaemon daemon(options);
  ard_client* client = MustCreate(TestOptions(daemon));
  char err[256] = "";
  const std::vector<float> values = Ramp(256, 1);
  void* data = nullptr;
  REQUIRE(ard_alloc(client, values.size() * sizeof(float), &data, err, sizeof(err)) == ARD_OK);
  std::memcpy(data, values.data(), values.size() * sizeof(float));
  FloatTensor t("t", values);
  t.request.data = data;
  uint64_t h = MustSubmit(client, t.request);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.held.size() == 1; }));
  REQUIRE(ard_free(client, data, err, sizeof(err)) == ARD_OK);
  void* other = nullptr;
  REQUIRE(ard_alloc(client, values.size() * sizeof(float), &other, err, sizeof(err)) == ARD_OK);
  CHECK(other != data);  // still read by the daemon: not handed out again
  daemon.CompleteAllHeld();
  ard_result r;
  REQUIRE(ard_wait(client, h, kWaitMs, &r) == ARD_OK);
  CHECK(IsDoubled(r, values));
  ard_release(client, h);
  void* again = nullptr;
  REQUIRE(ard_alloc(client, values.size() * sizeof(float), &again, err, sizeof(err)) == ARD_OK);
  CHECK(again == data);  // returned at completion; first fit finds it
  ard_client_destroy(client);
}

}  // namespace
}  // namespace ard::client::testing
