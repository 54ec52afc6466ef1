// The C API's shared memory against a fake daemon: input arena growth (ADD_SEGMENT before the
// SUBMIT that uses it), the arena cap, tensors above the first segment's size, and the lifetime
// of result memory across RELEASE.
#include <cstring>
#include <memory>
#include <vector>

#include "catch2/catch.hpp"
#include "client/allreduced_client.h"
#include "client/testing/client_test_util.h"
#include "client/testing/fake_daemon.h"

namespace ard::client::testing {
namespace {

using MT = wire::MsgType;

TEST_CASE("result memory stays valid until release, while released slots are reused") {
  FakeDaemonOptions options;
  options.hold_submits = true;
  FakeDaemon daemon(options);
  ard_client* client = MustCreate(TestOptions(daemon));
  FloatTensor a("a", Ramp(256, 1)), b("b", Ramp(256, 1000));
  uint64_t ha = MustSubmit(client, a.request), hb = MustSubmit(client, b.request);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.held.size() == 2; }));
  daemon.CompleteAllHeld();
  ard_result ra, rb;
  REQUIRE(ard_wait(client, ha, kWaitMs, &ra) == ARD_OK);
  REQUIRE(ard_wait(client, hb, kWaitMs, &rb) == ARD_OK);
  ard_release(client, ha);  // the fake poisons a's slot and may hand it out again
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.releases.size() == 1; }));
  FloatTensor c("c", Ramp(256, -5));
  uint64_t hc = MustSubmit(client, c.request);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.held.size() == 1; }));
  REQUIRE(daemon.CompleteHeld(hc));
  ard_result rc;
  REQUIRE(ard_wait(client, hc, kWaitMs, &rc) == ARD_OK);
  CHECK(rc.data == ra.data);  // first fit reused a's slot
  CHECK(IsDoubled(rc, c.values));
  CHECK(IsDoubled(rb, b.values));  // b untouched by a's release and c's reuse
  ard_release(client, hb);
  ard_release(client, hc);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.outstanding_results == 0; }));
  std::vector<uint64_t> releases = daemon.State().releases;
  CHECK(releases == std::vector<uint64_t>{ha, hb, hc});
  ard_client_destroy(client);
}

TEST_CASE("the arena grows by ADD_SEGMENT sent before the SUBMIT that uses it") {
  FakeDaemonOptions fake;
  fake.hold_submits = true;  // inputs stay allocated
  FakeDaemon daemon(fake);
  ard_options options = TestOptions(daemon);
  options.arena_segment_bytes = 64 << 10;
  ard_client* client = MustCreate(options);
  std::vector<std::unique_ptr<FloatTensor>> tensors;
  for (int i = 0; i < 4; ++i) {
    tensors.push_back(std::make_unique<FloatTensor>("g" + std::to_string(i), Ramp(12 << 10, i)));
    MustSubmit(client, tensors.back()->request);  // 48 KiB each
  }
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.submits.size() == 4; }));
  FakeDaemonState s = daemon.State();
  REQUIRE(s.added_segments.size() == 2);
  CHECK(s.added_segments[0].index == 1);
  CHECK(s.added_segments[0].bytes == (128u << 10));  // 2x the first
  CHECK(s.added_segments[1].index == 2);
  CHECK(s.added_segments[1].bytes == (256u << 10));
  std::vector<uint32_t> segments;
  for (auto& sub : s.submits) segments.push_back(sub.submit.segment);
  CHECK(segments == std::vector<uint32_t>{0, 1, 1, 2});
  for (auto& sub : s.submits) CHECK(sub.submit.offset % wire::kSlotAlignment == 0);
  std::vector<uint16_t> expected = {uint16_t(MT::kHello),      uint16_t(MT::kSubmit),
                                    uint16_t(MT::kAddSegment), uint16_t(MT::kSubmit),
                                    uint16_t(MT::kSubmit),     uint16_t(MT::kAddSegment),
                                    uint16_t(MT::kSubmit)};
  CHECK(s.frames == expected);
  CHECK(s.violations.empty());
  daemon.CompleteAllHeld();
  for (uint64_t h = 1; h <= 4; ++h) {
    ard_result r;
    REQUIRE(ard_wait(client, h, kWaitMs, &r) == ARD_OK);
    CHECK(IsDoubled(r, tensors[h - 1]->values));
    ard_release(client, h);
  }
  ard_client_destroy(client);
}

TEST_CASE("the arena cap makes submit fail with RESOURCE_EXHAUSTED until slots free up") {
  FakeDaemonOptions fake;
  fake.hold_submits = true;
  FakeDaemon daemon(fake);
  ard_options options = TestOptions(daemon);
  options.arena_segment_bytes = 64 << 10;
  options.arena_max_bytes = 128 << 10;
  ard_client* client = MustCreate(options);
  FloatTensor a("a", Ramp(12 << 10, 0)), b("b", Ramp(12 << 10, 1)), c("c", Ramp(12 << 10, 2));
  uint64_t ha = MustSubmit(client, a.request);
  MustSubmit(client, b.request);
  char err[512] = "";
  uint64_t h = 0;
  CHECK(ard_submit(client, &c.request, nullptr, nullptr, &h, err, sizeof(err)) ==
        ARD_RESOURCE_EXHAUSTED);
  CHECK(std::string(err).find("ALLREDUCED_ARENA_MAX_BYTES") != std::string::npos);
  FloatTensor huge("huge", Ramp(64 << 10, 0));  // 256 KiB > the whole cap
  CHECK(ard_submit(client, &huge.request, nullptr, nullptr, &h, err, sizeof(err)) ==
        ARD_RESOURCE_EXHAUSTED);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.held.size() == 2; }));
  REQUIRE(daemon.CompleteHeld(ha));
  ard_result r;
  REQUIRE(ard_wait(client, ha, kWaitMs, &r) == ARD_OK);  // COMPLETE freed a's input slot
  uint64_t hc = MustSubmit(client, c.request);
  REQUIRE(daemon.WaitFor([](const FakeDaemonState& s) { return s.held.size() == 2; }));
  REQUIRE(daemon.CompleteHeld(hc));
  REQUIRE(ard_wait(client, hc, kWaitMs, &r) == ARD_OK);
  CHECK(IsDoubled(r, c.values));
  ard_client_destroy(client);
  CHECK(daemon.State().violations.empty());
}

TEST_CASE("a tensor larger than the first segment and the default 64 MiB round-trips") {
  FakeDaemonOptions fake;
  fake.result_segment_bytes = 128ull << 20;
  FakeDaemon daemon(fake);
  ard_options options = TestOptions(daemon);
  options.arena_segment_bytes = 0;  // the default 64 MiB first segment
  options.arena_max_bytes = 1ull << 30;
  ard_client* client = MustCreate(options);
  std::vector<uint8_t> big((96u << 20) + 3);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 31 + 7);
  int64_t shape[1] = {static_cast<int64_t>(big.size())};
  ard_request request;
  ard_request_init(&request);
  request.collective = ARD_BROADCAST;  // the fake copies
  request.dtype = ARD_UINT8;
  request.name = "embedding";
  request.ndims = 1;
  request.shape = shape;
  request.data = big.data();
  request.bytes = big.size();
  uint64_t h = MustSubmit(client, request);
  ard_result r;
  REQUIRE(ard_wait(client, h, kWaitMs, &r) == ARD_OK);
  REQUIRE(r.bytes == big.size());
  CHECK(std::memcmp(r.data, big.data(), big.size()) == 0);
  ard_release(client, h);
  FakeDaemonState s = daemon.State();
  REQUIRE(s.added_segments.size() == 1);
  CHECK(s.added_segments[0].bytes == (128ull << 20));  // max(2 x 64 MiB, 96 MiB rounded)
  CHECK(s.hello.segment_bytes == (64ull << 20));
  ard_client_destroy(client);
}

}  // namespace
}  // namespace ard::client::testing
